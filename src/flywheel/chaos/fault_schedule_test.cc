#include "flywheel/chaos/fault_schedule.h"

#include <gtest/gtest.h>

#include <map>

namespace flywheel::chaos {
namespace {

TEST(FaultScheduleTest, OneSeedGivesOneSchedule) {
  const std::vector<std::string> targets = {"buffer", "learner", "actor-0"};
  FaultSchedule a(7, FaultScheduleOptions{}), b(7, FaultScheduleOptions{}), c(8, {});
  bool differs = false;
  for (int i = 0; i < 50; ++i) {
    const absl::Duration gap = a.NextGap();
    EXPECT_EQ(gap, b.NextGap());
    differs |= gap != c.NextGap();
    const Fault fa = a.Next(targets), fb = b.Next(targets);
    c.Next(targets);
    EXPECT_EQ(fa.DebugString(), fb.DebugString());
  }
  EXPECT_TRUE(differs);
}

TEST(FaultScheduleTest, FaultsFollowTheWeightsAndStayInTheirRanges) {
  FaultScheduleOptions options;
  options.mean_gap = absl::Seconds(2);
  FaultSchedule schedule(1, options);
  std::map<Fault::Kind, int> counts;
  std::map<std::string, int> targets;
  absl::Duration total;
  constexpr int kDraws = 4000;
  for (int i = 0; i < kDraws; ++i) {
    total += schedule.NextGap();
    const Fault f = schedule.Next({"buffer", "learner"});
    ++counts[f.kind];
    if (f.kind == Fault::Kind::kKill) {
      ++targets[f.target];
      EXPECT_LE(f.duration, options.max_restart_pause);
    }
    if (f.kind == Fault::Kind::kFreeze) {
      EXPECT_GE(f.duration, options.min_freeze);
      EXPECT_LE(f.duration, options.max_freeze);
    }
    if (f.kind == Fault::Kind::kDelay) {
      EXPECT_GE(f.delay, options.min_delay);
      EXPECT_LE(f.delay, options.max_delay);
    }
  }
  EXPECT_NEAR(absl::ToDoubleSeconds(total) / kDraws, 2.0, 0.15);
  EXPECT_NEAR(counts[Fault::Kind::kKill] / double{kDraws}, options.kill_weight, 0.03);
  EXPECT_NEAR(counts[Fault::Kind::kCut] / double{kDraws}, options.cut_weight, 0.03);
  EXPECT_NEAR(targets["buffer"], targets["learner"], 0.15 * targets["buffer"]);
}

TEST(FaultScheduleTest, WithoutTargetsTheNetworkTakesTheFault) {
  FaultScheduleOptions options;
  options.kill_weight = 1;
  options.freeze_weight = options.delay_weight = options.refuse_weight = options.cut_weight = 0;
  FaultSchedule schedule(3, options);
  EXPECT_EQ(schedule.Next({}).kind, Fault::Kind::kCut);
  const Fault kill = schedule.Next({"actor-1"});
  EXPECT_EQ(kill.kind, Fault::Kind::kKill);
  EXPECT_EQ(kill.target, "actor-1");
}

}  // namespace
}  // namespace flywheel::chaos
