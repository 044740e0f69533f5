#include "bench/pipeline_curve.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace flywheel::bench {
namespace {

namespace fs = std::filesystem;

std::vector<StepPoint> Curve(const std::vector<double>& rewards) {
  std::vector<StepPoint> points;
  for (size_t i = 0; i < rewards.size(); ++i) {
    points.push_back({.step = static_cast<int64_t>(i + 1),
                      .elapsed_s = 10.0 * static_cast<double>(i + 1),
                      .reward_mean = rewards[i],
                      .trajectories = 32,
                      .trained = 30,
                      .busy_s = 1,
                      .wait_s = 2});
  }
  return points;
}

TEST(PipelineCurveTest, TimeToTargetIsTheFirstFullWindowWhoseMeanReachesTheTarget) {
  // The lone 0.9 at step 2 lifts no window of three to 0.4; steps 5..7 (0.4, 0.5, 0.5) do.
  const CurveSummary s =
      SummariseCurve(Curve({0.1, 0.9, 0.1, 0.1, 0.4, 0.5, 0.5}),
                     {.target_reward = 0.4, .smooth_steps = 3, .final_steps = 2});
  ASSERT_TRUE(s.time_to_target_s.has_value());
  EXPECT_EQ(*s.target_step, 7);
  EXPECT_DOUBLE_EQ(*s.time_to_target_s, 70.0);
  EXPECT_DOUBLE_EQ(s.final_reward, 0.5);
  EXPECT_NEAR(s.first_smoothed_reward, 1.1 / 3, 1e-12);
  EXPECT_EQ(s.samples, 7 * 30);
  EXPECT_DOUBLE_EQ(s.busy_s, 7.0);
  EXPECT_DOUBLE_EQ(s.wait_s, 14.0);
}

TEST(PipelineCurveTest, NeverReachingTheTargetLeavesTimeToTargetEmpty) {
  const CurveSummary s = SummariseCurve(
      Curve({0.1, 0.2, 0.25, 0.2}), {.target_reward = 0.3, .smooth_steps = 2, .final_steps = 10});
  EXPECT_FALSE(s.time_to_target_s.has_value());
  EXPECT_FALSE(s.target_step.has_value());
  EXPECT_NEAR(s.best_smoothed_reward, 0.225, 1e-12);
  EXPECT_NEAR(s.final_reward, 0.1875, 1e-12);  // fewer steps than final_steps: all of them
}

TEST(PipelineCurveTest, FewerStepsThanTheWindowNeverReachTheTarget) {
  const CurveSummary s =
      SummariseCurve(Curve({1.0, 1.0}), {.target_reward = 0.5, .smooth_steps = 5});
  EXPECT_FALSE(s.time_to_target_s.has_value());
  EXPECT_DOUBLE_EQ(s.first_smoothed_reward, 1.0);
}

TEST(PipelineCurveTest, SmoothingWeighsStepsByBatchSize) {
  std::vector<StepPoint> points = Curve({0.0, 1.0});
  points[0].trajectories = 96;  // three times the second step's batch
  const CurveSummary s = SummariseCurve(points, {.target_reward = 0.3, .smooth_steps = 2});
  EXPECT_DOUBLE_EQ(s.first_smoothed_reward, 0.25);
  EXPECT_FALSE(s.time_to_target_s.has_value());
}

TEST(PipelineCurveTest, ReadsMetricsLinesAndSubtractsTheLearnersDrops) {
  const fs::path path = fs::temp_directory_path() / "pipeline_curve_test_metrics.jsonl";
  {
    std::ofstream out(path);
    out << R"({"step":1,"elapsed_s":0.5,"reward_mean":0.25,"trajectories":32,)"
        << R"("learner_busy_s":0.1,"learner_wait_s":0.4,)"
        << R"("dropped":{"learner_stale":3,"learner_too_long":1,"buffer_stale":7}})"
        << "\n\n";
  }
  absl::StatusOr<std::vector<StepPoint>> points = ReadStepPoints(path.string());
  ASSERT_TRUE(points.ok()) << points.status();
  ASSERT_EQ(points->size(), 1u);
  EXPECT_EQ((*points)[0].trained, 28);
  EXPECT_DOUBLE_EQ((*points)[0].wait_s, 0.4);
  fs::remove(path);
}

TEST(PipelineCurveTest, AMalformedLineIsAnErrorNamingFileAndLine) {
  const fs::path path = fs::temp_directory_path() / "pipeline_curve_test_bad.jsonl";
  {
    std::ofstream out(path);
    out << R"({"step":1,"elapsed_s":0.5,"reward_mean":0.25,"trajectories":32,)"
        << R"("learner_busy_s":0.1,"learner_wait_s":0.4,"dropped":{}})"
        << "\n";
    out << R"({"step":2,"elapsed_s":"soon"})"
        << "\n";
    out << "{truncated\n";
  }
  absl::StatusOr<std::vector<StepPoint>> points = ReadStepPoints(path.string());
  ASSERT_FALSE(points.ok());
  EXPECT_NE(points.status().message().find(path.string() + ":2"), std::string::npos)
      << points.status();
  EXPECT_FALSE(ReadStepPoints((fs::temp_directory_path() / "no_such_metrics.jsonl").string()).ok());
  fs::remove(path);
}

}  // namespace
}  // namespace flywheel::bench
