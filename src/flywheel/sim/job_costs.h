// A `flywheel train` job in the simulator's terms: what `flywheel sim calibrate` measured of
// the job on this machine (sim/calibration.h), and the simulator config that describes the job
// with those costs. Torch-free: the measurement is elsewhere, this is arithmetic and mapping.
//
// The measured costs become the cost model's figures so that its formulas give back what was
// measured (cost_model.h), with the device as one cell (devices_per_replica = 1):
//
//   decode step of b sequences = o_d + s·b        F = max(2P/s, 6P/t)
//   learner step on T tokens   = o_s + t·T        prefill_mfu = 2P/(F·s), mfu = 6P/(F·t)
//   weight swap into an engine = w                 interconnect = W / w
//
// F is a free unit (only the ratios enter the times): the larger of the two makes both shares
// ≤ 1. Memory is taken as unlimited: a cell holds actor.episodes_in_flight episodes, as the
// job's engine does, and the KV term of a decode step is left out (the calibrated contexts are
// short; DecodeStepSeconds then reduces to o_d + s·b).
#ifndef FLYWHEEL_SIM_JOB_COSTS_H_
#define FLYWHEEL_SIM_JOB_COSTS_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/sim/sim_config.h"

namespace flywheel::sim {

struct MeasuredCosts {
  // The model.
  double params = 0;
  int64_t layers = 0;
  int64_t hidden = 0;
  double kv_bytes_per_token = 0;
  double bytes_per_param = 4;  // float32 weights on the CPU
  int64_t max_seq_len = 0;
  // One decode step of b sequences: decode_overhead_s + decode_seconds_per_sequence · b.
  double decode_overhead_s = 0;
  double decode_seconds_per_sequence = 0;
  // One learner step on T tokens (whole trajectories) by one cell: step_overhead_s +
  // train_seconds_per_token · T (a group of n ranks, each on T / n tokens, took o + t·T: t·n here).
  double step_overhead_s = 0;
  double train_seconds_per_token = 0;
  // A new weight snapshot taken by a rollout engine.
  double weight_swap_s = 0;
  // Episodes of the policy, one entry each (as EpisodeOptions' trace_* arrays).
  std::vector<int64_t> turns, prompt_tokens, generated_tokens, observation_tokens;

  absl::Status Validate() const;
  nlohmann::json ToJson() const;
};

// Whether the simulator can describe `job`: an error names what it cannot (the tree job).
absl::Status CheckSimulable(const JobConfig& job);

// The simulator config of `job` (its mode, cells, batch, admission, staleness bound, scheduler,
// environment latency, time budget, steps and seed) on the measured costs.
//   colocated  devices = max(actor.num_actors, learner.world_size)
//   async      devices = actor.num_actors + learner.world_size, rollout_devices = num_actors
//   elastic    devices = scheduler.cells, core_cells = scheduler.core_cells
// Errors name what the simulator cannot represent (the tree job).
absl::StatusOr<SimConfig> SimConfigForJob(const JobConfig& job, const MeasuredCosts& costs);

}  // namespace flywheel::sim

#endif  // FLYWHEEL_SIM_JOB_COSTS_H_
