// An emulated slower device, for benchmarks that run more cells than the
// machine has cores.
//
// With a slowdown f ≥ 1, every piece of compute a cell does (a rollout engine's
// decode step, a learner's forward, backward or optimiser step) is followed by
// a wait of (f − 1) times its duration, and the whole f × duration counts as
// the device's busy time. A cell then needs only 1/f of a core, so 4 cells with
// f = 2 share 2 cores without oversubscribing them, each as a device f times
// slower than one core. Waiting, not spinning, is the point: the core is free
// for another cell meanwhile, as a separate device would leave it.
//
// The factor is process-wide (run.emulated_slowdown, set when a job starts; 1 =
// off). Jobs that run at the same time in one process share it.
#ifndef FLYWHEEL_CORE_EMULATED_DEVICE_H_
#define FLYWHEEL_CORE_EMULATED_DEVICE_H_

#include "absl/time/time.h"

namespace flywheel {

// f ≥ 1; values below 1 (or not finite) are taken as 1.
void SetEmulatedSlowdown(double factor);
double EmulatedSlowdown();

// Waits (f − 1) × `compute` and returns f × `compute`: how long the emulated
// device was busy.
absl::Duration EmulateDeviceTime(absl::Duration compute);

}  // namespace flywheel

#endif  // FLYWHEEL_CORE_EMULATED_DEVICE_H_
