#include "flywheel/runtime/learner_session.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/learner/trainer_state.h"
#include "flywheel/model/attention_layout.h"
#include "flywheel/model/safetensors.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace {

constexpr const char* kModelFile = "model.safetensors";

}  // namespace

nlohmann::json TrainedStep::MetricsLine(int64_t version, double elapsed_seconds) const {
  return {
      {"step", result.optimizer.step},
      {"version", version},
      {"elapsed_s", elapsed_seconds},
      {"reward_mean", reward_mean},
      {"success_rate", success_rate},
      {"trajectories", trajectories},
      {"loss", result.loss},
      {"lr", result.optimizer.lr},
      {"grad_norm", result.optimizer.grad_norm},
      {"mean_ratio", result.diagnostics.mean_ratio()},
      {"mean_is_weight", result.diagnostics.mean_is_weight()},
      {"clip_fraction", result.diagnostics.clip_fraction()},
      {"trainable_tokens", result.diagnostics.tokens},
      {"learner_busy_s", result.times.compute()},
      {"learner_wait_s", wait_seconds},
      {"lag_mean", lag_mean},
      {"lag_max", lag_max},
  };
}

absl::StatusOr<std::unique_ptr<LearnerSession>> LearnerSession::Open(
    const JobConfig& config, const ModelOptions& model_options, bool resume) {
  std::unique_ptr<LearnerSession> s(new LearnerSession(config));
  torch::manual_seed(static_cast<uint64_t>(config.run.seed));
  ASSIGN_OR_RETURN(s->model_, MakeTransformer(model_options));
  ASSIGN_OR_RETURN(s->run_dir_, RunDirectory::Open(config.run.runs_dir, config.run.name,
                                                   FormatJobConfig(config), resume));
  s->checkpoints_ = std::make_unique<CheckpointManager>(
      CheckpointOptions{s->run_dir_->checkpoints().string(), config.learner.keep_last});
  Transformer model = s->model_;
  PolicyForward forward = [model](const PackedMicroBatch& mb) -> absl::StatusOr<torch::Tensor> {
    ASSIGN_OR_RETURN(AttentionLayout layout, MakePackedLayout(mb.doc_lengths, mb.length));
    return TorchCallOr("policy forward", [&] { return model->forward(mb.tokens, layout); });
  };
  s->learner_ =
      std::make_unique<LearnerStep>(config.learner, config.run.max_steps, s->model_->parameters(),
                                    std::move(forward), nullptr, config.sampling.temperature);
  if (resume) {
    ASSIGN_OR_RETURN(std::optional<std::string> latest, s->checkpoints_->Latest());
    if (!latest.has_value()) {
      return absl::NotFoundError(
          StrCat("--resume: no complete checkpoint in ", s->run_dir_->checkpoints().string()));
    }
    RETURN_IF_ERROR(LoadStateDict(StrCat(*latest, "/", kModelFile), *s->model_));
    RETURN_IF_ERROR(ReadTrainerState(*latest, s->learner_->optimizer()));
  }
  return s;
}

absl::StatusOr<TrainedStep> LearnerSession::Step(std::vector<Trajectory> batch,
                                                 absl::Duration waited) {
  TrainedStep out;
  out.trajectories = static_cast<int64_t>(batch.size());
  out.wait_seconds = absl::ToDoubleSeconds(waited);
  learner_->tracker().Add(Phase::kWaitData, waited);
  wait_seconds_ += out.wait_seconds;
  double reward_sum = 0;
  int64_t successes = 0;
  for (const Trajectory& t : batch) {
    reward_sum += t.final_reward;
    successes += t.final_reward >= config_.run.success_reward;
  }
  if (out.trajectories > 0) {
    out.reward_mean = reward_sum / static_cast<double>(out.trajectories);
    out.success_rate = static_cast<double>(successes) / static_cast<double>(out.trajectories);
  }
  ASSIGN_OR_RETURN(out.result, learner_->Step(std::move(batch)));
  busy_seconds_ += out.result.times.compute();
  double lag_sum = 0;
  int64_t lag_n = 0;
  for (const auto& [lag, count] : out.result.staleness.lag_counts) {
    lag_sum += static_cast<double>(lag * count);
    lag_n += count;
    out.lag_max = std::max(out.lag_max, lag);
  }
  if (lag_n > 0) out.lag_mean = lag_sum / static_cast<double>(lag_n);
  const int64_t step = out.result.optimizer.step;
  if (config_.learner.checkpoint_every > 0 && step % config_.learner.checkpoint_every == 0) {
    RETURN_IF_ERROR(SaveCheckpoint(step));
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const WeightSnapshot>> LearnerSession::Snapshot() const {
  return MakeSnapshot(model_, learner_->version());
}

ProgressSnapshot LearnerSession::Progress(const TrainedStep& step, double elapsed_seconds,
                                          double buffer_fill, double tokens_per_s) const {
  return ProgressSnapshot{.step = step.result.optimizer.step,
                          .max_steps = config_.run.max_steps,
                          .reward = step.reward_mean,
                          .success = step.success_rate,
                          .learner_utilization = busy_seconds_ / std::max(1e-9, elapsed_seconds),
                          .mean_lag = step.lag_mean,
                          .buffer_fill = buffer_fill,
                          .tokens_per_s = tokens_per_s,
                          .elapsed_seconds = elapsed_seconds};
}

absl::Status LearnerSession::SaveCheckpoint(int64_t step) {
  return checkpoints_
      ->Save(step,
             [this](const std::string& dir) {
               RETURN_IF_ERROR(SaveStateDict(StrCat(dir, "/", kModelFile), *model_));
               return WriteTrainerState(dir, learner_->optimizer());
             })
      .status();
}

}  // namespace flywheel
