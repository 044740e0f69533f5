// Test helpers shared by the streaming-training tests (cells as threads in streaming_step_test,
// cells as processes in streaming_process_test): the fixed batches of each step, the order in
// which their groups arrive, and the single-process LearnerStep reference they must equal.
#ifndef FLYWHEEL_SCHEDULER_STREAMING_TEST_UTIL_H_
#define FLYWHEEL_SCHEDULER_STREAMING_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>
#include <vector>

#include "flywheel/learner/learner_step.h"
#include "flywheel/learner/parallel_test_util.h"

namespace flywheel::testing {

inline constexpr int kStreamingGroups = 6;

// The batch of step `step`: 6 groups of 4 random trajectories of 5 to 15 tokens generated at
// version `step`, so that a step has about 9 micro-steps of the parallel tests' shapes.
inline std::vector<std::vector<Trajectory>> GroupsForStep(int64_t step) {
  std::mt19937 rng(static_cast<uint32_t>(2000 + step));
  std::vector<std::vector<Trajectory>> groups(kStreamingGroups);
  for (int g = 0; g < kStreamingGroups; ++g) {
    for (int i = 0; i < 4; ++i) groups[g].push_back(RandomTrajectory(rng, step, g, i));
  }
  return groups;
}

inline std::vector<Trajectory> WholeBatch(int64_t step) {
  std::vector<Trajectory> batch;
  for (std::vector<Trajectory>& group : GroupsForStep(step)) {
    for (Trajectory& t : group) batch.push_back(std::move(t));
  }
  return batch;
}

// The groups of a step in arrival order, `per_chunk` groups per Add.
inline std::vector<std::vector<Trajectory>> Chunks(int64_t step, int per_chunk) {
  std::vector<std::vector<Trajectory>> chunks;
  std::vector<std::vector<Trajectory>> groups = GroupsForStep(step);
  for (size_t g = 0; g < groups.size(); ++g) {
    if (g % per_chunk == 0) chunks.emplace_back();
    for (Trajectory& t : groups[g]) chunks.back().push_back(std::move(t));
  }
  return chunks;
}

struct StreamingReference {
  std::vector<torch::Tensor> weights;
  std::vector<double> losses;
};

// LearnerStep::Step on each step's whole batch, from TinyPolicy(7).
inline StreamingReference LearnerStepReference(const LearnerOptions& options, int64_t steps) {
  torch::set_num_threads(1);
  TinyPolicy policy(7);
  LearnerStep learner(options, kParallelRunSteps, policy.Parameters(), policy.Forward());
  StreamingReference out;
  for (int64_t s = 0; s < steps; ++s) {
    auto result = learner.Step(WholeBatch(s));
    EXPECT_TRUE(result.ok()) << result.status();
    if (result.ok()) out.losses.push_back(result->loss);
  }
  out.weights = policy.Weights();
  return out;
}

}  // namespace flywheel::testing

#endif  // FLYWHEEL_SCHEDULER_STREAMING_TEST_UTIL_H_
