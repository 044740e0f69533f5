// The learning curve of one training run, read back from its metrics.jsonl, and the figures
// `flywheel bench pipeline` compares between async and colocated training:
//
//   samples          trajectories the learner trained on (a step's batch minus what its
//                    staleness filter and length limit dropped)
//   time_to_target   wall seconds (the step's elapsed_s) at the first step where the smoothed
//                    reward reaches the target; absent when it never does
//   final_reward     mean reward over the last `final_steps` steps
//
// Smoothing: the reward at step i is the sample-weighted mean of reward_mean over steps
// i-k+1 .. i (k = smooth_steps), taken only once k steps exist, so that a single lucky batch
// does not count as reaching the target. Rewards are those of the batches the learner
// received, i.e. of the policy that generated them (a few versions old in async mode).
#ifndef FLYWHEEL_BENCH_PIPELINE_CURVE_H_
#define FLYWHEEL_BENCH_PIPELINE_CURVE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel::bench {

// One line of metrics.jsonl, the fields the comparison needs.
struct StepPoint {
  int64_t step = 0;
  double elapsed_s = 0;      // since training started
  double reward_mean = 0;    // mean final reward of the step's batch
  int64_t trajectories = 0;  // the batch the learner received
  int64_t trained = 0;       // trajectories minus the learner's staleness and length drops
  double busy_s = 0;         // learner forward, backward, optimiser
  double wait_s = 0;         // learner blocked waiting for data (colocated: generation too)
};

// Reads metrics.jsonl; the error names the file and line that is not a metrics line.
absl::StatusOr<std::vector<StepPoint>> ReadStepPoints(const std::string& path);

struct CurveOptions {
  double target_reward = 0.3;
  int64_t smooth_steps = 5;
  int64_t final_steps = 10;
};

struct CurveSummary {
  int64_t steps = 0;
  int64_t samples = 0;  // trained
  double busy_s = 0;
  double wait_s = 0;
  std::optional<double> time_to_target_s;
  std::optional<int64_t> target_step;
  double final_reward = 0;
  double first_smoothed_reward = 0;  // the first full smoothing window: where learning began
  double best_smoothed_reward = 0;
};

CurveSummary SummariseCurve(const std::vector<StepPoint>& points, const CurveOptions& options);

}  // namespace flywheel::bench

#endif  // FLYWHEEL_BENCH_PIPELINE_CURVE_H_
