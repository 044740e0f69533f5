// The configuration of `flywheel sim CONFIG.toml`: the cluster and workload of the cost model,
// the training run to simulate, and the policies' knobs, which have the same names and meaning
// as in a `flywheel train` config (learner.max_staleness, run.batch_groups, scheduler.hysteresis):
//
//   [run]       name, runs_dir, seed, mode = "colocated" | "async" | "elastic", max_steps,
//               max_sim_hours, batch_groups, group_size, rollout_devices (async: the split K),
//               max_pipeline_batches (async: the job's admission)
//   [cluster]   devices, bf16_flops, memory_bytes, memory_bandwidth, interconnect_bandwidth, price
//   [workload]  model, generation, training, episode, env_latency (cost_model.h)
//   [actor]     episode_time_budget_s
//   [learner]   max_staleness, micro_steps, token_budget
//   [buffer]    max_size (the rate limiter's queue), max_staleness (dropped at sample time)
//   [scheduler] core_cells, controller, release_backlog_batches, recall_backlog_batches,
//               smoothing_steps, move_interval_steps, hysteresis, min_residence_seconds,
//               tick_seconds, drain_on_switch, unit, log_every_decision
#ifndef FLYWHEEL_SIM_SIM_CONFIG_H_
#define FLYWHEEL_SIM_SIM_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/core/config.h"
#include "flywheel/scheduler/scheduler_options.h"
#include "flywheel/sim/cost_model.h"

namespace flywheel::sim {

enum class SimMode { kColocated, kAsync, kElastic };
inline constexpr config::ChoiceName<SimMode> kSimModeNames[] = {
    {"colocated", SimMode::kColocated}, {"async", SimMode::kAsync}, {"elastic", SimMode::kElastic}};
std::string_view SimModeName(SimMode mode);

struct SimRunOptions {
  std::string name = "sim";
  std::string runs_dir = "runs";
  int64_t seed = 1;
  SimMode mode = SimMode::kElastic;
  int64_t max_steps = 20;
  double max_sim_hours = 0;     // 0: no bound on simulated time
  int64_t batch_groups = 8;     // groups per learner step
  int64_t group_size = 8;       // episodes per group (GRPO's G)
  int64_t rollout_devices = 0;  // async: devices that only generate; 0 = half the cluster
  // async: the job's admission, run.max_pipeline_batches (scheduler::PipelineAdmission); 0 =
  // version-bounded admission by learner.max_staleness, as the elastic mode admits.
  double max_pipeline_batches = 0;
  bool timeline = true;  // write timeline.jsonl (role changes and steps)

  template <typename V>
  void VisitFields(V& v) {
    v.Field("name", name, "run directory name under runs_dir");
    v.Field("runs_dir", runs_dir, "where run directories are created");
    v.Field("seed", seed, "seed of every draw: episode lengths, latencies, failures");
    v.Choice("mode", mode, kSimModeNames, "how devices are split between rollout and training");
    v.Field("max_steps", max_steps, "learner steps to simulate");
    v.Field("max_sim_hours", max_sim_hours, "stop after this much simulated time (0 = no bound)");
    v.Field("batch_groups", batch_groups, "groups per learner step");
    v.Field("group_size", group_size, "episodes per group");
    v.Field("rollout_devices", rollout_devices,
            "async: devices that only generate, the rest train (0 = half)");
    v.Field("max_pipeline_batches", max_pipeline_batches,
            "async: admit while episodes in flight + unsampled < this many batches, as a job's "
            "run.max_pipeline_batches (0 = admission by learner.max_staleness)");
    v.Field("timeline", timeline, "write timeline.jsonl: every role change and step");
  }
};

// The actor's time budget, as actor.episode_time_budget_s of a job: an episode still running
// that long after its start is cut and ends as a timeout; its trajectory (the turns it finished)
// still completes its group and is trained on, as a job trains on the partial score. The job
// looks at the budget when an environment step returns; the simulator cuts at the deadline
// itself, mid-generation or mid-step, which bounds how long any episode holds its slot.
struct SimActorOptions {
  double episode_time_budget_s = 0;  // 0: none

  template <typename V>
  void VisitFields(V& v) {
    v.Field("episode_time_budget_s", episode_time_budget_s,
            "an episode running this long is cut and trained on as a timeout (0 = none)");
  }
};

struct SimLearnerOptions {
  int64_t max_staleness = 1;  // η: admission and the staleness filter
  int64_t micro_steps = 8;    // a step's batch is split into this many claimable micro-steps
  int64_t token_budget = 0;   // > 0: micro-steps of this many tokens instead, as a job packs them

  template <typename V>
  void VisitFields(V& v) {
    v.Field("max_staleness", max_staleness, "versions an episode may lag its step (0 = on-policy)");
    v.Field("micro_steps", micro_steps, "micro-steps per learner step, claimed by training cells");
    v.Field("token_budget", token_budget,
            "> 0: a step has ceil(tokens / token_budget) micro-steps (learner.token_budget of a "
            "job) instead of learner.micro_steps");
  }
};

// The table is a queue of groups, each trained on once, behind the production rate limiter
// (RateLimiterOptions::Queue): inserts block while it holds max_size groups.
// max_staleness >= 0: the table drops a group whose lag exceeds it when the learner picks it, as
// a job's buffer does (buffer.max_staleness, by default learner.max_staleness; the elastic job
// leaves it off and bounds staleness at its step's queue).
struct SimBufferOptions {
  int64_t max_size = 1 << 20;
  int64_t max_staleness = -1;  // -1: off

  template <typename V>
  void VisitFields(V& v) {
    v.Field("max_size", max_size, "groups the table holds before inserts block");
    v.Field("max_staleness", max_staleness,
            "drop a group lagging the learner by more than this when sampled (-1 = off)");
  }
};

// The policy knobs of [scheduler] that the simulator uses; cells come from the cluster.
// The keys of a job's [scheduler] that move its cells (scheduler_options.h), with a residence and
// a tick for a cluster's scale (learner steps of minutes, not of a fraction of a second); the
// cells come from the cluster.
struct SimSchedulerOptions : SchedulerOptions {
  SimSchedulerOptions() {
    min_residence_seconds = 10;
    tick_seconds = 1;
  }

  template <typename V>
  void VisitFields(V& v) {
    v.Field("core_cells", core_cells, "elastic: cells that always train");
    VisitControllerFields(v);
  }
};

struct SimConfig {
  SimRunOptions run;
  ClusterOptions cluster;
  WorkloadOptions workload;
  SimActorOptions actor;
  SimLearnerOptions learner;
  SimBufferOptions buffer;
  SimSchedulerOptions scheduler;

  template <typename V>
  void VisitFields(V& v) {
    v.Section("run", run);
    v.Section("cluster", cluster);
    v.Section("workload", workload);
    v.Section("actor", actor);
    v.Section("learner", learner);
    v.Section("buffer", buffer);
    v.Section("scheduler", scheduler);
  }
  absl::Status Validate() const;

  // The [scheduler] options of a `flywheel train` job with `cells` cells, for ElasticRule.
  SchedulerOptions JobSchedulerOptions(int64_t cells) const;
};

// Reads CONFIG.toml, applies "--set key=value" overrides, validates.
absl::StatusOr<SimConfig> LoadSimConfig(const std::string& path,
                                        const std::vector<std::string>& overrides = {});
std::string FormatSimConfig(const SimConfig& config);

}  // namespace flywheel::sim

#endif  // FLYWHEEL_SIM_SIM_CONFIG_H_
