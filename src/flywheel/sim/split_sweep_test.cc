#include "flywheel/sim/split_sweep.h"

#include <gtest/gtest.h>

#include <string>

#include "flywheel/sim/sim_test_util.h"

namespace flywheel::sim {
namespace {

// The simulator tests' small cluster (eight replicas of one device): seven static splits, with
// slower training and fewer slots so that the split matters.
SimConfig Small() {
  SimConfig c = testing::SmallConfig(SimMode::kAsync);
  c.run.seed = 3;
  c.run.max_steps = 8;
  c.cluster.bf16_flops = 5e13;
  c.workload.generation.max_batch = 4;
  c.learner.max_staleness = 2;
  return c;
}

TEST(SplitSweepTest, SweepsEveryStaticSplitAndComparesElasticAndColocated) {
  absl::StatusOr<SplitSweep> sweep = SweepSplits(Small(), {.threads = 2});
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  ASSERT_EQ(sweep->statics.size(), 7u);
  for (size_t i = 0; i < sweep->statics.size(); ++i) {
    EXPECT_EQ(sweep->statics[i].rollout_devices, static_cast<int64_t>(i + 1));
    EXPECT_GE(sweep->statics[i].seconds, sweep->statics[sweep->best].seconds);
    EXPECT_EQ(sweep->statics[i].summary["steps"], 8);
  }
  EXPECT_EQ(sweep->statics[sweep->half].rollout_devices, 4);
  ASSERT_TRUE(sweep->elastic.has_value() && sweep->colocated.has_value());
  // Colocated is on-policy: every trajectory it trained had lag 0.
  const nlohmann::json& lags = sweep->colocated->summary["staleness"]["lag_counts"];
  EXPECT_EQ(lags.size(), 1u);
  EXPECT_TRUE(lags.contains("0"));
  EXPECT_DOUBLE_EQ(sweep->ElasticVsBest(),
                   sweep->statics[sweep->best].seconds / sweep->elastic->seconds);
  const nlohmann::json j = sweep->ToJson();
  EXPECT_EQ(j["best_static_K"], sweep->best_k());
  EXPECT_EQ(j["static"].size(), 7u);
  EXPECT_EQ(j["colocated_max_staleness"], 0);
  // The same sweep on one thread gives the same figures: runs share nothing.
  absl::StatusOr<SplitSweep> again = SweepSplits(Small(), {.threads = 1});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ToJson(), j);
}

TEST(SplitSweepTest, BadOptionsAreRefused) {
  EXPECT_FALSE(SweepSplits(Small(), {.stride = 0}).ok());
  SimConfig one = Small();
  one.cluster.devices = 1;
  EXPECT_FALSE(SweepSplits(one).ok());
}

}  // namespace
}  // namespace flywheel::sim
