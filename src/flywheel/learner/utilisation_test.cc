#include "flywheel/learner/utilisation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/core/metrics.h"

namespace flywheel {
namespace {

TEST(UtilisationTest, SplitsStepTimeByPhaseOnAVirtualClock) {
  VirtualClock clock;
  UtilisationTracker tracker(&clock);
  {
    auto t = tracker.Time(Phase::kWaitData);
    clock.Advance(absl::Seconds(1));
  }
  {
    auto t = tracker.Time(Phase::kForward);
    clock.Advance(absl::Seconds(2));
  }
  {
    auto t = tracker.Time(Phase::kBackward);
    clock.Advance(absl::Seconds(4));
  }
  {
    auto t = tracker.Time(Phase::kOptimizer);
    clock.Advance(absl::Seconds(1));
  }
  tracker.Add(Phase::kOther, absl::Seconds(2));
  const PhaseTimes step = tracker.EndStep();
  EXPECT_DOUBLE_EQ(step.total(), 10.0);
  EXPECT_DOUBLE_EQ(step.compute(), 7.0);
  EXPECT_DOUBLE_EQ(step.utilisation(), 0.7);
  EXPECT_DOUBLE_EQ(step[Phase::kWaitData], 1.0);
  EXPECT_EQ(tracker.current().total(), 0.0);  // the next step starts empty

  {
    auto t = tracker.Time(Phase::kWaitData);
    clock.Advance(absl::Seconds(10));
  }
  const PhaseTimes second = tracker.EndStep();
  EXPECT_DOUBLE_EQ(second.utilisation(), 0.0);
  EXPECT_EQ(tracker.cumulative().steps, 2);
  EXPECT_DOUBLE_EQ(tracker.cumulative().total(), 20.0);
  EXPECT_DOUBLE_EQ(tracker.cumulative().utilisation(), 0.35);
  EXPECT_DOUBLE_EQ(MetricsRegistry::Global().GetGauge("learner.utilisation")->value(), 0.35);
  EXPECT_DOUBLE_EQ(MetricsRegistry::Global().GetGauge("learner.seconds{phase=wait_data}")->value(),
                   11.0);
  EXPECT_EQ(tracker.cumulative().ToJson()["backward_s"], 4.0);
}

}  // namespace
}  // namespace flywheel
