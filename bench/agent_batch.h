// Synthetic agent trajectories for the learner benchmarks (`bench learner`, `bench
// learner-parallel`): a prompt quarter, then alternating turns of generated actions and
// environment observations of `turn` tokens; total length log-normal around `median`, clamped to
// [min_len, max_len]. Rewards differ within each group of 4, so GRPO advantages are not zero.
#ifndef FLYWHEEL_BENCH_AGENT_BATCH_H_
#define FLYWHEEL_BENCH_AGENT_BATCH_H_

#include <cstdint>
#include <random>
#include <vector>

#include "flywheel/core/trajectory.h"

namespace flywheel::bench {

struct AgentBatchShape {
  double median = 700;
  int64_t min_len = 16;
  int64_t max_len = 1024;
  int64_t turn = 32;
  int64_t vocab = 1000;
};

// `count` trajectories of learner step `step` (their ids and group ids name it).
std::vector<Trajectory> MakeAgentBatch(std::mt19937_64& rng, int64_t count,
                                       const AgentBatchShape& shape, int64_t step);

}  // namespace flywheel::bench

#endif  // FLYWHEEL_BENCH_AGENT_BATCH_H_
