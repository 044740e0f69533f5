// The comparison a competent user makes before trusting an elastic scheduler: on one workload,
// every static split of the cluster (K devices generating, the rest training, K swept over
// every whole replica) at the workload's staleness bound, against elastic on the same cells and
// seed, and colocated, which is on-policy by construction (η = 0: each batch is trained by the
// weights that generated it). `flywheel bench sim` and `flywheel plan` both read it.
//
//   K = d, 2d, …, devices − d ─▶ Simulate (async, rollout_devices = K) ─▶ time to max_steps
//   elastic                   ─▶ Simulate (elastic)                    ─▶ vs the best K, the half
//   colocated (η = 0)         ─▶ Simulate (colocated)                  ─▶ split, colocated
//
// Each run is an ordinary Simulate() call; runs share nothing, so they go `threads` at a time.
#ifndef FLYWHEEL_SIM_SPLIT_SWEEP_H_
#define FLYWHEEL_SIM_SPLIT_SWEEP_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/sim/sim_config.h"

namespace flywheel::sim {

struct SplitRun {
  int64_t rollout_devices = 0;  // static splits only
  nlohmann::json summary;       // the run's summary.json
  double seconds = 0;           // simulated time to run.max_steps (or to max_sim_hours)
  double samples_per_s = 0;     // trained samples per simulated second
  double tokens_per_s = 0;      // trained tokens per simulated second

  nlohmann::json Figures() const;
};

struct SweepOptions {
  bool elastic = true;
  bool colocated = true;
  int64_t stride = 1;  // K advances by this many replicas
  int threads = 1;     // simulations at once
};

struct SplitSweep {
  std::vector<SplitRun> statics;  // by K, ascending
  int best = -1;                  // the static split with the shortest time
  int half = -1;                  // K = half the devices (rounded down to a replica)
  std::optional<SplitRun> elastic;
  std::optional<SplitRun> colocated;

  int64_t best_k() const { return statics[best].rollout_devices; }
  // Time ratios: above 1, elastic is faster.
  double ElasticVsBest() const { return statics[best].seconds / elastic->seconds; }
  double ElasticVsHalf() const { return statics[half].seconds / elastic->seconds; }
  double ElasticVsColocated() const { return colocated->seconds / elastic->seconds; }
  double ElasticSwitchesPerStep() const;

  nlohmann::json ToJson() const;
};

// `config`'s workload and staleness bound; its run.mode and rollout_devices are replaced.
absl::StatusOr<SplitSweep> SweepSplits(const SimConfig& config, const SweepOptions& options = {});

}  // namespace flywheel::sim

#endif  // FLYWHEEL_SIM_SPLIT_SWEEP_H_
