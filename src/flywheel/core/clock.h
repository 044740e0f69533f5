// Time behind a small interface, so that latency models, timeouts and the simulator can run on
// either the real clock or a virtual one (LevelDB's Env idea, applied to time).
#ifndef FLYWHEEL_CORE_CLOCK_H_
#define FLYWHEEL_CORE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace flywheel {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
  // Waits `duration` of this clock's time.
  virtual void SleepFor(absl::Duration duration) = 0;
};

// The process-wide wall clock. Never null, never deleted.
Clock* RealClock();

// A clock that only moves when told to. SleepFor advances it instead of waiting, so a million
// draws of a heavy-tailed latency model take no real time. Thread-safe.
class VirtualClock : public Clock {
 public:
  explicit VirtualClock(absl::Time start = absl::UnixEpoch()) : now_(start) {}
  absl::Time Now() override;
  void SleepFor(absl::Duration duration) override;
  void Advance(absl::Duration duration) { SleepFor(duration); }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel

#endif  // FLYWHEEL_CORE_CLOCK_H_
