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
#ifndef FLYWHEEL_SIM_PLANNER_H_
#define FLYWHEEL_SIM_PLANNER_H_

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
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

struct Plan {
  std::vector<PlanCandidate> candidates;  // in the order simulated
  int best = -1;                          // index into candidates; -1: none meets the target
  // samples/s of the recommendation with the environment's mean latency × scale.
  std::vector<std::pair<double, double>> latency_sensitivity;

  nlohmann::json ToJson() const;
};

absl::StatusOr<Plan> MakePlan(const SimConfig& base, const PlanOptions& options);

// Sets the workload's environment latency from a real run's latency audit (`flywheel train`'s
// runs/NAME/summary.json: latency_audit.env_wait_seconds over episodes_finished): the mean wait
// of one environment step, taking the config's mean turn count per episode. The distribution's
// kind is kept (lognormal when the config had none). Returns one line saying what was taken.
absl::StatusOr<std::string> TakeLatencyFromRun(const std::filesystem::path& run_dir,
                                               SimConfig& config);

}  // namespace flywheel::sim

#endif  // FLYWHEEL_SIM_PLANNER_H_
