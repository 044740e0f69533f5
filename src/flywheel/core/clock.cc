#include "flywheel/core/clock.h"

#include "absl/time/clock.h"

namespace flywheel {
namespace {

class RealClockImpl : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration duration) override { absl::SleepFor(duration); }
};

}  // namespace

Clock* RealClock() {
  static RealClockImpl* clock = new RealClockImpl;
  return clock;
}

absl::Time VirtualClock::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void VirtualClock::SleepFor(absl::Duration duration) {
  if (duration <= absl::ZeroDuration()) return;
  absl::MutexLock lock(&mu_);
  now_ += duration;
}

}  // namespace flywheel
