#include "flywheel/core/emulated_device.h"

#include <gtest/gtest.h>

#include "absl/time/clock.h"

namespace flywheel {
namespace {

TEST(EmulatedDeviceTest, OffByDefaultAndBelowOne) {
  EXPECT_EQ(EmulatedSlowdown(), 1.0);
  EXPECT_EQ(EmulateDeviceTime(absl::Milliseconds(5)), absl::Milliseconds(5));
  SetEmulatedSlowdown(0.5);
  EXPECT_EQ(EmulatedSlowdown(), 1.0);
}

TEST(EmulatedDeviceTest, WaitsTheRestOfTheSlowerDevicesTime) {
  SetEmulatedSlowdown(3.0);
  const absl::Time before = absl::Now();
  const absl::Duration busy = EmulateDeviceTime(absl::Milliseconds(20));
  const absl::Duration waited = absl::Now() - before;
  SetEmulatedSlowdown(1.0);
  EXPECT_EQ(busy, absl::Milliseconds(60));
  EXPECT_GE(waited, absl::Milliseconds(40));  // (3 − 1) × 20 ms; a sleep never ends early
  EXPECT_EQ(EmulateDeviceTime(absl::Milliseconds(7)),
            absl::Milliseconds(7));  // off again
}

}  // namespace
}  // namespace flywheel
