#include "flywheel/sim/planner.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace flywheel::sim {
namespace {

// Up to eight devices for a 1B policy, four-turn episodes with one-second environment steps.
SimConfig PlannerWorkload() {
  SimConfig c;
  c.run.seed = 3;
  c.run.batch_groups = 4;
  c.run.group_size = 4;
  c.cluster.devices = 8;
  c.cluster.bf16_flops = 1e15;
  c.workload.model.params = 1e9;
  c.workload.model.layers = 16;
  c.workload.model.hidden = 2048;
  c.workload.generation.max_batch = 8;
  c.workload.env_latency.model = LatencyKind::kConstant;
  c.workload.env_latency.mean_ms = 1000;
  c.scheduler.min_residence_seconds = 2;
  return c;
}

TEST(PlannerTest, BudgetModePicksTheFastestOnTheBudget) {
  absl::StatusOr<Plan> plan = MakePlan(PlannerWorkload(), {.steps = 4});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GE(plan->best, 0);
  for (const PlanCandidate& c : plan->candidates) {
    EXPECT_EQ(c.config.cluster.devices, 8);
    EXPECT_LE(c.samples_per_s, plan->candidates[plan->best].samples_per_s);
  }
  // Colocated, three static splits and elastic were all tried.
  bool colocated = false, async = false, elastic = false;
  for (const PlanCandidate& c : plan->candidates) {
    colocated |= c.config.run.mode == SimMode::kColocated;
    async |= c.config.run.mode == SimMode::kAsync;
    elastic |= c.config.run.mode == SimMode::kElastic;
  }
  EXPECT_TRUE(colocated && async && elastic);
  // A slower environment cannot make an environment-bound job faster.
  ASSERT_EQ(plan->latency_sensitivity.size(), 2u);
  EXPECT_EQ(plan->latency_sensitivity[1].first, 2.0);
  EXPECT_LE(plan->latency_sensitivity[1].second, plan->candidates[plan->best].samples_per_s);
}

TEST(PlannerTest, TargetModePicksTheCheapestThatReachesTheTarget) {
  const PlanOptions budget{.steps = 4};
  absl::StatusOr<Plan> fastest = MakePlan(PlannerWorkload(), budget);
  ASSERT_TRUE(fastest.ok()) << fastest.status();
  const double target = fastest->candidates[fastest->best].samples_per_s * 0.3;
  absl::StatusOr<Plan> plan =
      MakePlan(PlannerWorkload(), {.target_samples_per_s = target, .steps = 4});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GE(plan->best, 0);
  const PlanCandidate& best = plan->candidates[plan->best];
  EXPECT_GE(best.samples_per_s, target);
  for (const PlanCandidate& c : plan->candidates) {
    if (c.meets_target) EXPECT_GE(c.usd_per_hour, best.usd_per_hour) << c.label;
  }
  // Fewer devices than the budget were tried.
  EXPECT_LT(plan->candidates.front().config.cluster.devices, 8);

  absl::StatusOr<Plan> impossible =
      MakePlan(PlannerWorkload(), {.target_samples_per_s = 1e9, .steps = 2});
  ASSERT_TRUE(impossible.ok()) << impossible.status();
  EXPECT_EQ(impossible->best, -1);
  EXPECT_TRUE(impossible->ToJson()["recommendation"].is_null());
}

TEST(PlannerTest, ABudgetThatHoldsNoSplitIsRefused) {
  const absl::Status status = MakePlan(PlannerWorkload(), {.max_devices = 1}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("devices_per_replica"), std::string_view::npos);
}

TEST(PlannerTest, TakesTheEnvironmentLatencyOfARealRun) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "flywheel_plan_from_run";
  std::filesystem::create_directories(dir);
  {
    std::ofstream summary(dir / "summary.json");
    summary << R"({"episodes_finished": 100, "latency_audit": {"env_wait_seconds": 1200}})";
  }
  SimConfig config = PlannerWorkload();  // 4 turns per episode, constant latency
  absl::StatusOr<std::string> note = TakeLatencyFromRun(dir, config);
  ASSERT_TRUE(note.ok()) << note.status();
  // 1200 s / 100 episodes / 4 turns = 3 s per environment step.
  EXPECT_DOUBLE_EQ(config.workload.env_latency.mean_ms, 3000);
  EXPECT_EQ(config.workload.env_latency.model, LatencyKind::kConstant);
  EXPECT_NE(note->find("3000 ms per step"), std::string::npos) << *note;
  {
    std::ofstream summary(dir / "summary.json");
    summary << R"({"mode": "elastic"})";
  }
  EXPECT_EQ(TakeLatencyFromRun(dir, config).status().code(), absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(TakeLatencyFromRun(dir, config).status().code(), absl::StatusCode::kNotFound);
}

// The advice compares every static split with elastic under each load; its verdict follows from
// its own figures.
TEST(PlannerTest, ElasticAdviceSweepsTheSplitsUnderEachLoad) {
  SimConfig config = PlannerWorkload();
  config.run.mode = SimMode::kElastic;
  config.run.max_steps = 6;
  absl::StatusOr<ElasticAdvice> advice = AdviseElastic(config, {0.25, 4.0});
  ASSERT_TRUE(advice.ok()) << advice.status();
  ASSERT_EQ(advice->loads.size(), 3u);
  EXPECT_EQ(advice->loads[0].latency_scale, 1.0);
  for (const ElasticAdvice::Load& l : advice->loads) {
    EXPECT_GT(l.best_k, 0);
    EXPECT_LT(l.best_k, config.cluster.devices);
    EXPECT_LE(l.best_seconds, l.fixed_seconds);  // the best split is no slower than any other
    EXPECT_GT(l.elastic_seconds, 0);
    EXPECT_GE(advice->fixed_worst, 0);
    EXPECT_LE(advice->fixed_worst, l.best_seconds / l.fixed_seconds + 1e-12);
  }
  EXPECT_EQ(advice->elastic_pays,
            advice->fixed_worst < 0.95 && advice->elastic_worst > advice->fixed_worst);
  EXPECT_FALSE(advice->verdict.empty());
  EXPECT_EQ(advice->ToJson()["loads"].size(), 3u);
}

}  // namespace
}  // namespace flywheel::sim
