#include "flywheel/sim/sim_config.h"

#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/sim/hf_model_config.h"

namespace flywheel::sim {
namespace {

// A config.json and a figure it derives, both given, would leave the reader guessing which one
// the simulation used: refused, naming both (a --set override counts as given).
absl::Status CheckHfConfigAlone(const toml::table& table, std::string_view source) {
  const toml::table* model = table.at_path("workload.model").as_table();
  // An empty hf_config is what a printed effective config holds: the keys below are then given.
  const std::optional<std::string_view> hf =
      model == nullptr ? std::nullopt : (*model)["hf_config"].value<std::string_view>();
  if (!hf.has_value() || hf->empty()) return absl::OkStatus();
  std::vector<std::string> both;
  for (std::string_view key : kHfDerivedModelKeys) {
    if (model->contains(key)) both.push_back(StrCat("workload.model.", key));
  }
  if (both.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat(source, ": ", Join(both, ", "),
                                           " given together with workload.model.hf_config, ",
                                           "which derives ", Join(kHfDerivedModelKeys, ", "),
                                           " from the config.json: remove one or the other"));
}

}  // namespace

std::string_view SimModeName(SimMode mode) {
  for (const auto& n : kSimModeNames) {
    if (n.value == mode) return n.name;
  }
  return "unknown";
}

absl::Status SimConfig::Validate() const {
  RETURN_IF_ERROR(cluster.Validate());
  RETURN_IF_ERROR(workload.Validate());
  if (run.name.empty()) return absl::InvalidArgumentError("run.name must not be empty");
  if (run.max_steps < 1) {
    return absl::InvalidArgumentError(
        StrCat("run.max_steps must be >= 1 (got ", run.max_steps, ")"));
  }
  if (!(std::isfinite(run.max_sim_hours) && run.max_sim_hours >= 0)) {
    return absl::InvalidArgumentError("run.max_sim_hours must be >= 0 (0 = no bound)");
  }
  if (run.batch_groups < 1 || run.group_size < 1) {
    return absl::InvalidArgumentError("run.batch_groups and run.group_size must be >= 1");
  }
  if (!(std::isfinite(actor.episode_time_budget_s) && actor.episode_time_budget_s >= 0)) {
    return absl::InvalidArgumentError(StrCat("actor.episode_time_budget_s must be >= 0 (got ",
                                             actor.episode_time_budget_s, "; 0 = no budget)"));
  }
  if (learner.max_staleness < 0) {
    return absl::InvalidArgumentError(
        "learner.max_staleness must be >= 0: admission bounds how far ahead of the learner "
        "episodes start (0 = on-policy)");
  }
  if (learner.micro_steps < 1)
    return absl::InvalidArgumentError("learner.micro_steps must be >= 1");
  if (learner.token_budget < 0) {
    return absl::InvalidArgumentError("learner.token_budget must be >= 0 (0 = learner.micro_steps)");
  }
  if (!(std::isfinite(run.max_pipeline_batches) && run.max_pipeline_batches >= 0)) {
    return absl::InvalidArgumentError(
        "run.max_pipeline_batches must be >= 0 (0 = admission by learner.max_staleness)");
  }
  if (buffer.max_staleness < -1) {
    return absl::InvalidArgumentError("buffer.max_staleness must be >= -1 (-1 = off)");
  }
  if (buffer.max_size < run.batch_groups) {
    return absl::InvalidArgumentError(StrCat("buffer.max_size = ", buffer.max_size,
                                             " is below run.batch_groups = ", run.batch_groups,
                                             ": a step could never be sampled"));
  }
  const int64_t d = workload.model.devices_per_replica;
  const int64_t cells = d > 0 ? cluster.devices / d : 0;
  if (run.mode != SimMode::kColocated && cells < 2) {
    return absl::InvalidArgumentError(StrCat(
        "run.mode = \"", SimModeName(run.mode), "\" needs two replicas or more (cluster.",
        "devices / workload.model.devices_per_replica = ", cells, "): one generates, one trains"));
  }
  if (run.mode == SimMode::kAsync && run.rollout_devices != 0 &&
      (run.rollout_devices % d != 0 || run.rollout_devices < d ||
       run.rollout_devices > cluster.devices - d)) {
    return absl::InvalidArgumentError(
        StrCat("run.rollout_devices = ", run.rollout_devices, " must be a multiple of ",
               "workload.model.devices_per_replica = ", d, " in [", d, ", ", cluster.devices - d,
               "]: each side needs a replica"));
  }
  if (run.mode == SimMode::kElastic) {
    RETURN_IF_ERROR(JobSchedulerOptions(cells).Validate());
  }
  return absl::OkStatus();
}

SchedulerOptions SimConfig::JobSchedulerOptions(int64_t cells) const {
  SchedulerOptions options = scheduler;
  options.cells = cells;
  return options;
}

absl::StatusOr<SimConfig> LoadSimConfig(const std::string& path,
                                        const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(toml::table table, config::ParseTomlFile(path));
  for (const auto& assignment : overrides) {
    RETURN_IF_ERROR(config::ApplyOverride(table, assignment));
  }
  RETURN_IF_ERROR(CheckHfConfigAlone(table, path));
  SimConfig sim;
  RETURN_IF_ERROR(config::Bind(table, path, sim));
  RETURN_IF_ERROR(
      Annotate(ApplyHfConfig(std::filesystem::path(path).parent_path(), sim.workload.model), path));
  RETURN_IF_ERROR(Annotate(sim.Validate(), path));
  return sim;
}

std::string FormatSimConfig(const SimConfig& config) { return config::Format(config); }

}  // namespace flywheel::sim
