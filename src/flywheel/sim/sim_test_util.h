// Configs the simulator's tests share.
#ifndef FLYWHEEL_SIM_SIM_TEST_UTIL_H_
#define FLYWHEEL_SIM_SIM_TEST_UTIL_H_

#include "flywheel/sim/sim_config.h"

namespace flywheel::sim::testing {

// Eight 1e15 FLOP/s devices, a 1B model, four-turn episodes of ~4K tokens with two-second
// environment steps: generation is short next to the environment, as in agentic RL.
inline SimConfig SmallConfig(SimMode mode) {
  SimConfig c;
  c.run.mode = mode;
  c.run.seed = 7;
  c.run.max_steps = 12;
  c.run.batch_groups = 4;
  c.run.group_size = 4;
  c.cluster.devices = 8;
  c.cluster.bf16_flops = 1e15;
  c.cluster.memory_bandwidth = 2e12;
  c.workload.model.params = 1e9;
  c.workload.model.layers = 16;
  c.workload.model.hidden = 2048;
  c.workload.generation.max_batch = 8;
  c.workload.episode.length = LengthKind::kLognormal;
  c.workload.episode.mean_tokens = 4096;
  c.workload.episode.min_tokens = 1024;
  c.workload.episode.max_tokens = 8192;
  c.workload.env_latency.model = LatencyKind::kLognormal;
  c.workload.env_latency.mean_ms = 2000;
  c.workload.env_latency.sigma = 1.0;
  c.learner.max_staleness = 1;
  c.scheduler.min_residence_seconds = 2;
  c.scheduler.tick_seconds = 0.5;
  return c;
}

}  // namespace flywheel::sim::testing

#endif  // FLYWHEEL_SIM_SIM_TEST_UTIL_H_
