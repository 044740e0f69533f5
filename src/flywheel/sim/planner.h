// `flywheel plan`: sizing a deployment by simulating candidates. From one simulation config (the
// workload, the device type, its price), the planner simulates a grid of deployments
//
//   devices           powers of two × devices_per_replica up to max_devices (target mode), or
//                     max_devices alone (budget mode)
//   split             colocated; async with 1/4, 1/2, 3/4 of the devices generating; elastic
//   staleness bound   learner.max_staleness ∈ {0, 1, 2, 4}: admission lets batches up to η
//                     ahead start, so it is also the admission depth (η + 1 batches in flight)
//   concurrency       workload.generation.max_batch ∈ {as configured, half}: episodes per replica
//                     (once when KV memory, not max_batch, bounds them)
//
// and recommends, in target mode, the cheapest (USD per simulated hour, then the fastest) that
// reaches target_samples_per_s trained samples/s, or in budget mode the fastest. It then reruns
// the recommendation with the environment's latency scaled (×0.5, ×2) to show how much the
// choice depends on it; a real run's latency audit can set that latency (TakeLatencyFromRun).
// Each candidate is an ordinary Simulate() call.
//
// Last, whether the elastic scheduler is worth it for the recommended deployment (its devices and
// η): under each load (the environment's latency as configured and × each latency scale, each
// held steady, at least 60 learner steps) every static split is swept (split_sweep.h) against
// elastic. A static split
// suffices when one K is within 5 % of each load's best; elastic pays when none is and elastic
// is closer to every load's best than the one K a user would have to pick (the best worst case).
#ifndef FLYWHEEL_SIM_PLANNER_H_
#define FLYWHEEL_SIM_PLANNER_H_

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/sim/sim_config.h"

namespace flywheel::sim {

struct PlanOptions {
  // > 0: the cheapest deployment reaching this many trained samples/s. 0: the fastest one on
  // max_devices devices.
  double target_samples_per_s = 0;
  int64_t max_devices = 0;  // 0: the config's cluster.devices
  int64_t steps = 20;       // learner steps simulated per candidate
  std::vector<double> latency_scales = {0.5, 2.0};
  bool elastic_advice = true;

  absl::Status Validate() const;
};

struct PlanCandidate {
  std::string label;  // "async 32/64 eta=2 batch=64"
  SimConfig config;
  double samples_per_s = 0;
  double learner_utilization = 0;
  double device_utilisation = 0;  // generating + training share of the device time
  double usd_per_hour = 0;
  double usd_per_1k_samples = 0;
  bool meets_target = false;

  nlohmann::json ToJson() const;
};

// Static splits against elastic under loads that differ by the environment's latency.
struct ElasticAdvice {
  struct Load {
    double latency_scale = 1;
    int64_t best_k = 0;       // the fastest static split under this load
    double best_seconds = 0;  // its time to the steps simulated
    double elastic_seconds = 0;
    double fixed_seconds = 0;  // the one split for every load (fixed_k) under this load
  };
  int64_t devices = 0;
  int64_t max_staleness = 0;
  std::vector<Load> loads;
  int64_t fixed_k = 0;       // the static split whose worst ratio to each load's best is highest
  double fixed_worst = 0;    // that ratio (best time / its time), worst load
  double elastic_worst = 0;  // elastic's, worst load
  bool elastic_pays = false;
  std::string verdict;  // one sentence

  nlohmann::json ToJson() const;
};

struct Plan {
  std::vector<PlanCandidate> candidates;  // in the order simulated
  int best = -1;                          // index into candidates; -1: none meets the target
  // samples/s of the recommendation with the environment's mean latency × scale.
  std::vector<std::pair<double, double>> latency_sensitivity;
  std::optional<ElasticAdvice> elastic_advice;  // for the recommendation

  nlohmann::json ToJson() const;
};

absl::StatusOr<Plan> MakePlan(const SimConfig& base, const PlanOptions& options);

// The advice alone, for `config`'s cluster, η and workload under the latency scales (1 and each
// of `latency_scales`).
absl::StatusOr<ElasticAdvice> AdviseElastic(const SimConfig& config,
                                            const std::vector<double>& latency_scales);

// Sets the workload's environment latency from a real run's latency audit (`flywheel train`'s
// runs/NAME/summary.json: latency_audit.env_wait_seconds over episodes_finished): the mean wait
// of one environment step, taking the config's mean turn count per episode. The distribution's
// kind is kept (lognormal when the config had none). Returns one line saying what was taken.
absl::StatusOr<std::string> TakeLatencyFromRun(const std::filesystem::path& run_dir,
                                               SimConfig& config);

}  // namespace flywheel::sim

#endif  // FLYWHEEL_SIM_PLANNER_H_
