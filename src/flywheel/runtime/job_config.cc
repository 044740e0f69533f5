#include "flywheel/runtime/job_config.h"

#include "flywheel/core/config.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {

absl::Status JobConfig::Validate() const {
  RETURN_IF_ERROR(run.Validate());
  RETURN_IF_ERROR(model.Validate());
  RETURN_IF_ERROR(env.Validate());
  RETURN_IF_ERROR(sampling.Validate());
  RETURN_IF_ERROR(actor.Validate());
  RETURN_IF_ERROR(learner.Validate());
  RETURN_IF_ERROR(buffer.Validate());
  RETURN_IF_ERROR(tree.Validate());
  RETURN_IF_ERROR(scheduler.Validate());
  if (run.mode == TrainMode::kElastic) {
    // The cells are the learner's replicas: the elastic job forms its own groups per step.
    if (learner.world_size > 1 || learner.sharding != ShardingMode::kNone || tree.enabled) {
      return absl::InvalidArgumentError(
          "run.mode = \"elastic\": its cells (scheduler.cells) are the learner's ranks; set "
          "learner.world_size = 1, learner.sharding = \"none\" and tree.enabled = false");
    }
  }
  if (tree.enabled && learner.world_size > 1) {
    return absl::InvalidArgumentError(
        StrCat("learner.world_size = ", learner.world_size,
               " with tree.enabled: the tree job trains on one learner rank; set "
               "learner.world_size = 1"));
  }
  if (learner.tensor_parallel > 1) {
    // The tensor-parallel mesh (learner/tensor_parallel.h) trains inside LearnerStep; the jobs
    // form data-parallel groups only, so refuse rather than train without it.
    return absl::InvalidArgumentError(
        StrCat("learner.tensor_parallel = ", learner.tensor_parallel,
               ": flywheel train and flywheel learner form data-parallel and sharded groups "
               "(learner.world_size, learner.sharding); set learner.tensor_parallel = 1"));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobConfig> LoadJobConfig(const std::string& path,
                                        const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(toml::table table, config::ParseTomlFile(path));
  for (const auto& assignment : overrides) {
    RETURN_IF_ERROR(config::ApplyOverride(table, assignment));
  }
  JobConfig job;
  RETURN_IF_ERROR(config::Bind(table, path, job));
  RETURN_IF_ERROR(Annotate(job.Validate(), path));
  return job;
}

std::string FormatJobConfig(const JobConfig& config) { return config::Format(config); }

}  // namespace flywheel
