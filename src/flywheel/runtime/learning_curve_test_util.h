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

// The two ends of a success curve (one rate per learner step), in windows of `window` steps.
inline absl::StatusOr<CurveEnds> EndsOf(const std::vector<double>& success, size_t window) {
  if (window == 0 || success.size() < 2 * window) {
    return absl::FailedPreconditionError(
        StrCat(success.size(), " learner steps, fewer than two windows of ", window));
  }
  auto mean = [&](size_t begin) {
    double sum = 0;
    for (size_t i = begin; i < begin + window; ++i) sum += success[i];
    return sum / static_cast<double>(window);
  };
  return CurveEnds{success.size(), mean(0), mean(success.size() - window)};
}

// Trains `config` in the embedded job, quietly, reads the success rate of its metrics.jsonl and
// removes the run directory.
inline absl::StatusOr<CurveEnds> TrainForCurve(const JobConfig& config, size_t window) {
  EmbeddedJobOptions options;
  options.progress = nullptr;
  absl::StatusOr<EmbeddedJobResult> result = RunEmbeddedJob(config, options);
  if (!result.ok()) return result.status();
  std::vector<double> success;
  for (const nlohmann::json& line : ReadMetrics(config)) {
    success.push_back(line["success_rate"].get<double>());
  }
  std::filesystem::remove_all(config.run.runs_dir);
  return EndsOf(success, window);
}

// The learning checks' assertion: a policy succeeding sometimes at the start, and the last
// `window` steps `margin` above the first `window`.
inline void ExpectLifted(const CurveEnds& curve, size_t window, double margin) {
  std::cout << "success over the first " << window << " RL steps " << curve.first
            << ", over the last " << window << " " << curve.last << "\n";
  EXPECT_GT(curve.first, 0.0) << "the warm start should leave the policy succeeding sometimes";
  EXPECT_GT(curve.last, curve.first + margin);
}

// The warm-started tasks' check: `config` (a warm start, then `steps` RL steps) must leave the
// policy succeeding sometimes, and its last `window` steps `margin` above the first `window`.
inline void ExpectWarmStartLifted(const JobConfig& config, int steps, size_t window,
                                  double margin) {
  absl::StatusOr<CurveEnds> curve = TrainForCurve(config, window);
  ASSERT_TRUE(curve.ok()) << curve.status();
  EXPECT_EQ(curve->steps, static_cast<size_t>(steps));
  ExpectLifted(*curve, window, margin);
}

}  // namespace flywheel::testing

#endif  // FLYWHEEL_RUNTIME_LEARNING_CURVE_TEST_UTIL_H_
