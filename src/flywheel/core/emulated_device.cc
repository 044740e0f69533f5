#include "flywheel/core/emulated_device.h"

#include <atomic>
#include <cmath>

#include "absl/time/clock.h"

namespace flywheel {
namespace {

std::atomic<double> g_slowdown{1.0};

}  // namespace

void SetEmulatedSlowdown(double factor) {
  g_slowdown.store(std::isfinite(factor) && factor > 1.0 ? factor : 1.0);
}

double EmulatedSlowdown() { return g_slowdown.load(); }

absl::Duration EmulateDeviceTime(absl::Duration compute) {
  const double f = g_slowdown.load();
  if (f <= 1.0 || compute <= absl::ZeroDuration()) return compute;
  absl::SleepFor(compute * (f - 1.0));
  return compute * f;
}

}  // namespace flywheel
