#include "flywheel/runtime/job_config.h"

#include <spdlog/spdlog.h>

#include "flywheel/core/config.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/env/tasks/copy.h"
#include "flywheel/model/hf_generation_config.h"
#include "flywheel/runtime/sampling_defaults.h"

namespace flywheel {
namespace {

// A copy answer is one policy turn as long as the string: a turn cut by actor.max_new_tokens or
// a sequence cut by model.max_seq_len can never be exact, so the longest strings would teach
// nothing and the heavy tail of generation lengths the task exists for would be clipped.
absl::Status ValidateCopyLengths(const JobConfig& job) {
  const int64_t answer = CopyAnswerTokens(job.env.copy);
  if (job.actor.max_new_tokens < answer) {
    return absl::InvalidArgumentError(
        StrCat("actor.max_new_tokens = ", job.actor.max_new_tokens,
               " cannot hold a copy answer of env.copy.max_length = ", job.env.copy.max_length,
               " digits, the end marker and end-of-turn; set actor.max_new_tokens >= ", answer));
  }
  // BOS, the string, end-of-turn, then the answer.
  const int64_t episode = job.env.copy.max_length + 2 + answer;
  if (job.model.max_seq_len < episode) {
    return absl::InvalidArgumentError(
        StrCat("model.max_seq_len = ", job.model.max_seq_len,
               " cannot hold a copy episode of env.copy.max_length = ", job.env.copy.max_length,
               "; set model.max_seq_len >= ", episode));
  }
  return absl::OkStatus();
}

}  // namespace

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
  RETURN_IF_ERROR(gateway.Validate());
  RETURN_IF_ERROR(sft.Validate());
  if (sft.enabled() && (tree.enabled || learner.world_size > 1 || run.mode == TrainMode::kElastic)) {
    // The tree job warm-starts with its own imitation steps on the harness's executions.
    return absl::InvalidArgumentError(
        "sft.steps > 0 runs in one learner process (learner.world_size = 1) of an async or "
        "colocated job; the tree job has tree.imitation_steps instead");
  }
  if (run.mode == TrainMode::kElastic) {
    // The cells are the learner's replicas: the elastic job forms its own groups per step.
    if (learner.world_size > 1 || learner.sharding != ShardingMode::kNone || tree.enabled) {
      return absl::InvalidArgumentError(
          "run.mode = \"elastic\": its cells (scheduler.cells) are the learner's ranks; set "
          "learner.world_size = 1, learner.sharding = \"none\" and tree.enabled = false");
    }
    if (learner.kl_coef > 0) {
      return absl::InvalidArgumentError(
          "run.mode = \"elastic\" has no reference model for learner.kl_coef; set it to 0");
    }
  }
  if (tree.enabled && run.oversample > 0) {
    return absl::InvalidArgumentError(
        "run.oversample is a colocated flywheel train option without tree.enabled: the tree job "
        "generates its instances whole; set run.oversample = 0");
  }
  if (tree.enabled && learner.world_size > 1) {
    return absl::InvalidArgumentError(
        StrCat("learner.world_size = ", learner.world_size,
               " with tree.enabled: the tree job trains on one learner rank; set "
               "learner.world_size = 1"));
  }
  if (model.dtype != "float32" && learner.sharding == ShardingMode::kFull) {
    // Its backward re-runs each gathered layer outside the forward's autocast, in float32: the
    // gradient would not be the bfloat16 forward's.
    return absl::InvalidArgumentError(
        StrCat("model.dtype = \"", model.dtype,
               "\" with learner.sharding = \"full\" is not supported; use learner.sharding = "
               "\"none\" or model.dtype = \"float32\""));
  }
  if (env.kind == EnvKind::kCopy) RETURN_IF_ERROR(ValidateCopyLengths(*this));
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

namespace {

absl::StatusOr<JobConfig> BindJobConfig(toml::table& table, std::string_view source,
                                        const std::vector<std::string>& overrides) {
  for (const auto& assignment : overrides) {
    RETURN_IF_ERROR(config::ApplyOverride(table, assignment));
  }
  JobConfig job;
  RETURN_IF_ERROR(config::Bind(table, source, job));
  if (!job.model.path.empty()) {
    // Here, while the table still tells which [sampling] keys the job set (sampling_defaults.h).
    ASSIGN_OR_RETURN(const HfGenerationConfig generation,
                     LoadHfGenerationConfig(job.model.path));
    ASSIGN_OR_RETURN(const std::vector<std::string> applied,
                     ApplyGenerationDefaults(table, generation,
                                             StrCat(job.model.path, "/generation_config.json"),
                                             &job.sampling));
    if (!applied.empty()) {
      spdlog::info("from {}/generation_config.json: {}", job.model.path, Join(applied, ", "));
    }
  }
  RETURN_IF_ERROR(Annotate(job.Validate(), source));
  return job;
}

}  // namespace

absl::StatusOr<JobConfig> LoadJobConfig(const std::string& path,
                                        const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(toml::table table, config::ParseTomlFile(path));
  return BindJobConfig(table, path, overrides);
}

absl::StatusOr<JobConfig> ParseJobConfig(std::string_view text, std::string_view source,
                                         const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(toml::table table, config::ParseToml(text, source));
  return BindJobConfig(table, source, overrides);
}

std::string FormatJobConfig(const JobConfig& config) { return config::Format(config); }

}  // namespace flywheel
