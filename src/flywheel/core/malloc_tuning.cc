#include "flywheel/core/malloc_tuning.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace flywheel {
namespace {

#if defined(__GLIBC__)
constexpr int kMmapThreshold = 32 << 20;     // glibc's own ceiling for the adaptive threshold
constexpr int kTrimThreshold = 1 << 30;      // return the heap's top only above 1 GiB free
constexpr int kTopPad = 64 << 20;            // grow the heap 64 MiB at a time

void SetUnlessInEnvironment(int param, int value, const char* env) {
  if (std::getenv(env) == nullptr) mallopt(param, value);
}
#endif

}  // namespace

std::string MallocTuning::DebugString() const {
  return applied ? "malloc: freed blocks below 32 MiB stay in the heap (trim above 1 GiB)"
                 : "malloc: not glibc, left as it is";
}

MallocTuning TuneMallocForTensors() {
  MallocTuning tuning;
#if defined(__GLIBC__)
  SetUnlessInEnvironment(M_MMAP_THRESHOLD, kMmapThreshold, "MALLOC_MMAP_THRESHOLD_");
  SetUnlessInEnvironment(M_TRIM_THRESHOLD, kTrimThreshold, "MALLOC_TRIM_THRESHOLD_");
  SetUnlessInEnvironment(M_TOP_PAD, kTopPad, "MALLOC_TOP_PAD_");
  tuning.applied = true;
#endif
  return tuning;
}

}  // namespace flywheel
