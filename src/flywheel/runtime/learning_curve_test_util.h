// The learning tests' shared part: train a job and read the two ends of its success curve.
#ifndef FLYWHEEL_RUNTIME_LEARNING_CURVE_TEST_UTIL_H_
#define FLYWHEEL_RUNTIME_LEARNING_CURVE_TEST_UTIL_H_

#include <cstddef>
#include <filesystem>
#include <iostream>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/statusor.h"
#include "flywheel/core/strings.h"
#include "flywheel/runtime/embedded_job.h"
#include "flywheel/runtime/job_test_util.h"

namespace flywheel::testing {

struct CurveEnds {
  size_t steps = 0;  // learner steps in metrics.jsonl
  double first = 0;  // mean success rate of the first `window` steps
  double last = 0;   // and of the last
};

// Trains `config` in the embedded job, quietly, reads the success rate of its metrics.jsonl and
// removes the run directory.
inline absl::StatusOr<CurveEnds> TrainForCurve(const JobConfig& config, size_t window) {
  EmbeddedJobOptions options;
  options.progress = nullptr;
  absl::StatusOr<EmbeddedJobResult> result = RunEmbeddedJob(config, options);
  if (!result.ok()) return result.status();
  const std::vector<nlohmann::json> lines = ReadMetrics(config);
  std::filesystem::remove_all(config.run.runs_dir);
  if (lines.size() < 2 * window) {
    return absl::FailedPreconditionError(
        StrCat(lines.size(), " learner steps, fewer than two windows of ", window));
  }
  auto mean = [&](size_t begin) {
    double sum = 0;
    for (size_t i = begin; i < begin + window; ++i) sum += lines[i]["success_rate"].get<double>();
    return sum / static_cast<double>(window);
  };
  return CurveEnds{lines.size(), mean(0), mean(lines.size() - window)};
}

// The warm-started tasks' check: `config` (a warm start, then `steps` RL steps) must leave the
// policy succeeding sometimes, and its last `window` steps `margin` above the first `window`.
inline void ExpectWarmStartLifted(const JobConfig& config, int steps, size_t window,
                                  double margin) {
  absl::StatusOr<CurveEnds> curve = TrainForCurve(config, window);
  ASSERT_TRUE(curve.ok()) << curve.status();
  EXPECT_EQ(curve->steps, static_cast<size_t>(steps));
  std::cout << "success over the first " << window << " RL steps " << curve->first
            << ", over the last " << window << " " << curve->last << "\n";
  EXPECT_GT(curve->first, 0.0) << "the warm start should leave the policy succeeding sometimes";
  EXPECT_GT(curve->last, curve->first + margin);
}

}  // namespace flywheel::testing

#endif  // FLYWHEEL_RUNTIME_LEARNING_CURVE_TEST_UTIL_H_
