// Keeps freed tensor memory in glibc's heap instead of handing it back to the kernel.
//
// LibTorch's CPU allocator takes every tensor from malloc. glibc serves blocks above its mmap
// threshold with a fresh mmap and unmaps them on free, and trims the heap's free top above its
// trim threshold; both start small (128 KiB) and adapt only slowly. A training step allocates
// and frees the same activations every micro-batch, and each time the pages come back from the
// kernel zeroed: on the main job (examples/guess.toml, 2 cores) page faults were about 9 % of
// all CPU samples and system time a quarter of user time. With the thresholds raised, the same
// blocks are reused from the heap (system time about 10 % of user time, docs/model.md).
//
// Called once at the start of `flywheel`, before any thread starts. A threshold the user set in
// the environment (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_) is left as
// set. Blocks above 32 MiB that the heap's free top cannot hold (large models' weights and
// activations) are still mapped per block: there the fault cost is small next to the work on them.
#ifndef FLYWHEEL_CORE_MALLOC_TUNING_H_
#define FLYWHEEL_CORE_MALLOC_TUNING_H_

#include <string>

namespace flywheel {

struct MallocTuning {
  bool applied = false;    // false on a libc without mallopt (not glibc)
  std::string DebugString() const;
};

MallocTuning TuneMallocForTensors();

}  // namespace flywheel

#endif  // FLYWHEEL_CORE_MALLOC_TUNING_H_
