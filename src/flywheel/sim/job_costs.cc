#include "flywheel/sim/job_costs.h"

#include <algorithm>
#include <cmath>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/scheduler/elastic_control.h"

namespace flywheel::sim {
namespace {

bool FinitePositive(double x) { return std::isfinite(x) && x > 0; }
bool FiniteNonNegative(double x) { return std::isfinite(x) && x >= 0; }

}  // namespace

absl::Status MeasuredCosts::Validate() const {
  if (!FinitePositive(params) || layers < 1 || hidden < 1 || !FinitePositive(kv_bytes_per_token) ||
      !FinitePositive(bytes_per_param) || max_seq_len < 1) {
    return absl::InvalidArgumentError("measured costs: the model's figures must be positive");
  }
  if (!FinitePositive(decode_seconds_per_sequence) || !FinitePositive(train_seconds_per_token) ||
      !FiniteNonNegative(decode_overhead_s) || !FiniteNonNegative(step_overhead_s) ||
      !FiniteNonNegative(weight_swap_s)) {
    return absl::InvalidArgumentError(StrCat(
        "measured costs: need decode and training seconds > 0 and overheads >= 0 (got decode ",
        decode_overhead_s, " + ", decode_seconds_per_sequence, " per sequence, step ",
        step_overhead_s, " + ", train_seconds_per_token, " per token, swap ", weight_swap_s, ")"));
  }
  if (turns.empty() || prompt_tokens.size() != turns.size() ||
      generated_tokens.size() != turns.size() || observation_tokens.size() != turns.size()) {
    return absl::InvalidArgumentError(
        "measured costs: no episodes, or episode arrays of unequal "
        "lengths");
  }
  return absl::OkStatus();
}

nlohmann::json MeasuredCosts::ToJson() const {
  double generated = 0, total = 0, turn_sum = 0;
  for (size_t i = 0; i < turns.size(); ++i) {
    generated += static_cast<double>(generated_tokens[i]);
    total += static_cast<double>(prompt_tokens[i] + generated_tokens[i] + observation_tokens[i]);
    turn_sum += static_cast<double>(turns[i]);
  }
  const double n = std::max<double>(1, static_cast<double>(turns.size()));
  return {{"model",
           {{"params", params},
            {"layers", layers},
            {"hidden", hidden},
            {"kv_bytes_per_token", kv_bytes_per_token},
            {"bytes_per_param", bytes_per_param},
            {"max_seq_len", max_seq_len}}},
          {"decode_overhead_s", decode_overhead_s},
          {"decode_seconds_per_sequence", decode_seconds_per_sequence},
          {"step_overhead_s", step_overhead_s},
          {"train_seconds_per_token", train_seconds_per_token},
          {"weight_swap_s", weight_swap_s},
          {"episodes",
           {{"count", turns.size()},
            {"mean_turns", turn_sum / n},
            {"mean_generated_tokens", generated / n},
            {"mean_tokens", total / n}}}};
}

absl::Status CheckSimulable(const JobConfig& job) {
  if (!job.tree.enabled) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "tree.enabled = true: the simulator has no model of the tree job's agent harness "
      "(retries, summaries, sub-agents); calibrate a job without it");
}

absl::StatusOr<SimConfig> SimConfigForJob(const JobConfig& job, const MeasuredCosts& costs) {
  RETURN_IF_ERROR(CheckSimulable(job));
  RETURN_IF_ERROR(costs.Validate());
  SimConfig sim;
  sim.run.name = job.run.name;
  sim.run.seed = job.run.seed;
  sim.run.max_steps = job.run.max_steps;
  sim.run.batch_groups = job.run.batch_groups;
  sim.run.group_size = job.actor.group_size;
  const int64_t actors = job.actor.num_actors;
  const int64_t ranks = job.learner.world_size;
  switch (job.run.mode) {
    case TrainMode::kColocated:
      sim.run.mode = SimMode::kColocated;
      sim.cluster.devices = std::max(actors, ranks);
      break;
    case TrainMode::kAsync:
      sim.run.mode = SimMode::kAsync;
      sim.cluster.devices = actors + ranks;
      sim.run.rollout_devices = actors;
      sim.run.max_pipeline_batches = job.run.max_pipeline_batches;
      break;
    case TrainMode::kElastic:
      sim.run.mode = SimMode::kElastic;
      sim.cluster.devices = job.scheduler.cells;
      break;
  }

  // The device: F makes the shares of both kernels at most 1 (only ratios enter the times).
  const double p = costs.params;
  const double flops =
      std::max(2 * p / costs.decode_seconds_per_sequence, 6 * p / costs.train_seconds_per_token);
  ClusterOptions& cluster = sim.cluster;
  cluster.bf16_flops = flops;
  // Room for every episode's KV reservation next to the weights: the engine's slots are
  // actor.episodes_in_flight, not its memory.
  const double weights = p * costs.bytes_per_param;
  cluster.memory_bytes =
      2 * (weights + costs.kv_bytes_per_token * static_cast<double>(costs.max_seq_len) *
                         static_cast<double>(job.actor.episodes_in_flight));
  cluster.memory_bandwidth = 1e18;  // the KV term is left out (job_costs.h)
  cluster.interconnect_bandwidth = costs.weight_swap_s > 0 ? weights / costs.weight_swap_s : 1e18;
  cluster.price_per_device_hour = 0;

  WorkloadOptions& w = sim.workload;
  w.model.params = p;
  w.model.layers = costs.layers;
  w.model.hidden = costs.hidden;
  w.model.kv_bytes_per_token = costs.kv_bytes_per_token;
  w.model.bytes_per_param = costs.bytes_per_param;
  w.model.devices_per_replica = 1;
  w.generation.max_batch = job.actor.episodes_in_flight;
  // One of the two shares is 1 up to rounding (1.0000000000000002 is not a share): clamped.
  w.generation.prefill_mfu = std::min(1.0, 2 * p / (flops * costs.decode_seconds_per_sequence));
  w.generation.bandwidth_efficiency = 1;
  w.generation.decode_step_overhead_s = costs.decode_overhead_s;
  w.training.mfu = std::min(1.0, 6 * p / (flops * costs.train_seconds_per_token));
  w.training.switch_overhead_s = 0;  // a cell's role change is the weight swap (transfer)
  w.training.step_overhead_s = costs.step_overhead_s;

  EpisodeOptions& e = w.episode;
  e.length = LengthKind::kTrace;
  e.trace_turns = costs.turns;
  e.trace_prompt_tokens = costs.prompt_tokens;
  e.trace_generated_tokens = costs.generated_tokens;
  e.trace_observation_tokens = costs.observation_tokens;
  e.max_tokens = costs.max_seq_len;
  e.min_tokens = 2;
  e.prompt_tokens = 1;
  e.mean_tokens = static_cast<double>(costs.max_seq_len);
  // A job's environment answers every turn, the last one included, and its reset takes a step's
  // latency too (env/latency/latency_env.h).
  e.final_env_step = true;
  e.reset_env_step = true;
  w.env_latency = job.env.latency;

  sim.actor.episode_time_budget_s = job.actor.episode_time_budget_s;
  sim.learner.max_staleness = std::max<int64_t>(0, job.learner.max_staleness);
  sim.learner.token_budget = job.learner.token_budget;
  // As the job sizes its buffer: a colocated batch fits; what admission admitted fits.
  sim.buffer.max_size = std::max(job.buffer.max_size, job.run.batch_groups);
  if (sim.run.mode == SimMode::kAsync && job.run.max_pipeline_batches > 0) {
    sim.buffer.max_size =
        std::max(sim.buffer.max_size,
                 scheduler::PipelineAdmission::For(job.run.max_pipeline_batches,
                                                   job.run.batch_groups, job.actor.group_size)
                         .groups +
                     actors);
  }
  // The job's buffer bound at sample time (the elastic job bounds staleness at its step's queue).
  if (sim.run.mode != SimMode::kElastic) {
    sim.buffer.max_staleness =
        job.buffer.max_staleness >= 0 ? job.buffer.max_staleness : job.learner.max_staleness;
  }
  // The job's controller and its cells' moves, as the job runs them.
  static_cast<SchedulerOptions&>(sim.scheduler) = job.scheduler;
  RETURN_IF_ERROR(Annotate(sim.Validate(), "the simulator config of the job"));
  return sim;
}

}  // namespace flywheel::sim
