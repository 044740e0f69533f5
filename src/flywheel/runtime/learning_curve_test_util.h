// The learning tests' shared part: train a job and read the two ends of its success curve.
#ifndef FLYWHEEL_RUNTIME_LEARNING_CURVE_TEST_UTIL_H_
#define FLYWHEEL_RUNTIME_LEARNING_CURVE_TEST_UTIL_H_

#include <cstddef>
#include <filesystem>
#include <vector>

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

}  // namespace flywheel::testing

#endif  // FLYWHEEL_RUNTIME_LEARNING_CURVE_TEST_UTIL_H_
