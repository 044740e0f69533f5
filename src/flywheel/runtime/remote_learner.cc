#include "flywheel/runtime/remote_learner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "flywheel/actor/env_tokenizer.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/learner/checkpoint.h"
#include "flywheel/learner/learner_step.h"
#include "flywheel/learner/trainer_state.h"
#include "flywheel/model/attention_layout.h"
#include "flywheel/model/safetensors.h"
#include "flywheel/model/torch_status.h"
#include "flywheel/model/transformer.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/progress.h"
#include "flywheel/runtime/remote_buffer.h"
#include "flywheel/runtime/remote_connect.h"
#include "flywheel/runtime/run_directory.h"
#include "flywheel/weights/service.h"

namespace flywheel {
namespace {

constexpr const char* kModelFile = "model.safetensors";
// How long one sample request waits before the loop rechecks whether to stop.
constexpr absl::Duration kPoll = absl::Milliseconds(200);

// Per actor (Trajectory::actor_id): what the last batch held from it.
struct ActorContribution {
  int64_t trajectories = 0;
  int64_t max_version = -1;
};

// The group size the buffer announces in its one-line description ("group_size=8"), or -1.
int64_t AnnouncedGroupSize(const std::string& description) {
  const std::string key = "group_size=";
  const size_t at = description.find(key);
  if (at == std::string::npos) return -1;
  try {
    return std::stoll(description.substr(at + key.size()));
  } catch (const std::exception&) {
    return -1;
  }
}

class RemoteLearner {
 public:
  RemoteLearner(const JobConfig& config, const RemoteLearnerOptions& options)
      : config_(config), options_(options) {}

  absl::Status Init();
  absl::StatusOr<RemoteLearnerResult> Train();

 private:
  bool Stopping() const { return options_.stop != nullptr && options_.stop->load(); }
  // Up to batch_groups groups; fewer only when stopping.
  absl::StatusOr<std::vector<Trajectory>> CollectBatch();
  absl::Status Publish();
  absl::Status SaveCheckpoint(int64_t step);
  void Finish();

  const JobConfig config_;
  const RemoteLearnerOptions options_;
  std::unique_ptr<EnvFactory> factory_;
  std::unique_ptr<Tokenizer> tokenizer_;
  Transformer model_{nullptr};
  std::unique_ptr<RunDirectory> run_dir_;
  std::unique_ptr<CheckpointManager> checkpoints_;
  std::unique_ptr<LearnerStep> learner_;
  std::unique_ptr<RemoteBuffer> buffer_;
  std::unique_ptr<WeightsServer> weights_;
  absl::Time buffer_last_ok_ = absl::Now();
};

absl::Status RemoteLearner::Init() {
  torch::manual_seed(static_cast<uint64_t>(config_.run.seed));
  ASSIGN_OR_RETURN(factory_, EnvFactory::Create(config_.env));
  ASSIGN_OR_RETURN(tokenizer_, MakeTokenizer(factory_->vocabulary()));
  ASSIGN_OR_RETURN(ModelOptions model_options,
                   ResolveModelOptions(config_, *tokenizer_, factory_->task_name()));
  ASSIGN_OR_RETURN(model_, MakeTransformer(model_options));

  // Reach the buffer before creating anything on disk: a wrong address leaves no run behind.
  ASSIGN_OR_RETURN(buffer_, RemoteBuffer::Connect(options_.buffer_address, options_.auth_token));
  std::string description;
  RETURN_IF_ERROR(WaitForService(
      "buffer", options_.buffer_address, options_.connect_timeout,
      [&] {
        absl::StatusOr<v1::ServerInfoResponse> info = buffer_->Info();
        if (info.ok()) description = info->description();
        return info.status();
      },
      options_.stop));
  const int64_t group_size = AnnouncedGroupSize(description);
  if (group_size > 0 && group_size != config_.actor.group_size) {
    return absl::InvalidArgumentError(
        StrCat("the buffer at ", options_.buffer_address, " releases groups of ", group_size,
               " trajectories but actor.group_size = ", config_.actor.group_size,
               ": start it with --set buffer.group_size=", config_.actor.group_size,
               " (group advantages need whole groups)"));
  }

  ASSIGN_OR_RETURN(run_dir_, RunDirectory::Open(config_.run.runs_dir, config_.run.name,
                                                FormatJobConfig(config_), options_.resume));
  checkpoints_ = std::make_unique<CheckpointManager>(
      CheckpointOptions{run_dir_->checkpoints().string(), config_.learner.keep_last});
  PolicyForward forward = [this](const PackedMicroBatch& mb) -> absl::StatusOr<torch::Tensor> {
    ASSIGN_OR_RETURN(AttentionLayout layout, MakePackedLayout(mb.doc_lengths, mb.length));
    return TorchCallOr("policy forward", [&] { return model_->forward(mb.tokens, layout); });
  };
  learner_ =
      std::make_unique<LearnerStep>(config_.learner, config_.run.max_steps, model_->parameters(),
                                    std::move(forward), nullptr, config_.sampling.temperature);
  if (options_.resume) {
    ASSIGN_OR_RETURN(std::optional<std::string> latest, checkpoints_->Latest());
    if (!latest.has_value()) {
      return absl::NotFoundError(
          StrCat("--resume: no complete checkpoint in ", run_dir_->checkpoints().string()));
    }
    RETURN_IF_ERROR(LoadStateDict(StrCat(*latest, "/", kModelFile), *model_));
    RETURN_IF_ERROR(ReadTrainerState(*latest, learner_->optimizer()));
  }
  RETURN_IF_ERROR(buffer_->SetLearnerVersion(learner_->version()));

  WeightsServerOptions weights_options;
  weights_options.address = options_.weights_listen;
  weights_options.auth_token = options_.auth_token;
  ASSIGN_OR_RETURN(weights_, WeightsServer::Start(weights_options));
  RETURN_IF_ERROR(Publish());
  if (options_.on_serving) options_.on_serving(weights_->address());
  return absl::OkStatus();
}

absl::Status RemoteLearner::Publish() {
  ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> snapshot,
                   MakeSnapshot(model_, learner_->version()));
  return weights_->Publish(*snapshot);
}

absl::StatusOr<std::vector<Trajectory>> RemoteLearner::CollectBatch() {
  std::vector<Trajectory> batch;
  int64_t groups = 0;
  while (groups < config_.run.batch_groups && !Stopping()) {
    absl::StatusOr<std::vector<std::vector<Trajectory>>> items =
        buffer_->SampleGroups(static_cast<int>(config_.run.batch_groups - groups), kPoll);
    if (!items.ok()) {
      if (!IsTransient(items.status())) return items.status();
      // The buffer is restarting or unreachable: keep trying for connect_timeout.
      if (absl::Now() - buffer_last_ok_ > options_.connect_timeout) {
        return absl::UnavailableError(StrCat(
            "lost the buffer at ", options_.buffer_address, " for ",
            absl::ToDoubleSeconds(options_.connect_timeout), " s: ", items.status().message()));
      }
      absl::SleepFor(kPoll);
      continue;
    }
    buffer_last_ok_ = absl::Now();
    for (std::vector<Trajectory>& group : *items) {
      if (static_cast<int64_t>(group.size()) > config_.actor.group_size) {
        return absl::FailedPreconditionError(
            StrCat("the buffer at ", options_.buffer_address, " released a group of ", group.size(),
                   " trajectories, more than actor.group_size = ", config_.actor.group_size));
      }
      for (Trajectory& t : group) batch.push_back(std::move(t));
      ++groups;
    }
  }
  return batch;
}

absl::Status RemoteLearner::SaveCheckpoint(int64_t step) {
  return checkpoints_
      ->Save(step,
             [this](const std::string& dir) {
               RETURN_IF_ERROR(SaveStateDict(StrCat(dir, "/", kModelFile), *model_));
               return WriteTrainerState(dir, learner_->optimizer());
             })
      .status();
}

void RemoteLearner::Finish() {
  if (weights_ == nullptr) return;
  // Actors poll the version; "finished" tells them to stop rather than wait for more weights.
  weights_->SetFinished();
  const absl::Time until = absl::Now() + options_.finished_linger;
  while (absl::Now() < until && !Stopping()) absl::SleepFor(absl::Milliseconds(50));
  weights_->Shutdown();
}

absl::StatusOr<RemoteLearnerResult> RemoteLearner::Train() {
  const RunOptions& run = config_.run;
  std::optional<ProgressReporter> progress;
  if (options_.progress != nullptr) {
    progress.emplace(options_.progress, options_.progress_is_terminal, absl::Seconds(10));
  }
  const absl::Time start = absl::Now();
  RemoteLearnerResult result;
  double busy_total = 0, wait_total = 0, best_success = 0;
  std::map<std::string, int64_t> actor_trajectories;  // over the whole run
  int64_t step = learner_->optimizer().step();
  while (step < run.max_steps) {
    if (Stopping()) break;
    if (run.max_wall_seconds > 0 &&
        absl::ToDoubleSeconds(absl::Now() - start) >= run.max_wall_seconds) {
      break;
    }
    const absl::Time wait_start = absl::Now();
    ASSIGN_OR_RETURN(std::vector<Trajectory> batch, CollectBatch());
    if (Stopping()) break;  // a partial batch is not trained on
    const double wait_s = absl::ToDoubleSeconds(absl::Now() - wait_start);
    learner_->tracker().Add(Phase::kWaitData, absl::Now() - wait_start);

    double reward_sum = 0;
    int64_t successes = 0;
    std::map<std::string, ActorContribution> by_actor;
    for (const Trajectory& t : batch) {
      reward_sum += t.final_reward;
      successes += t.final_reward >= run.success_reward;
      ActorContribution& c = by_actor[t.actor_id];
      ++c.trajectories;
      c.max_version = std::max(c.max_version, t.MaxVersion());
      ++actor_trajectories[t.actor_id];
    }
    const int64_t batch_size = static_cast<int64_t>(batch.size());
    absl::StatusOr<LearnerStepResult> stepped = learner_->Step(std::move(batch));
    if (absl::IsUnavailable(stepped.status())) continue;  // all of it too stale: fetch more
    if (!stepped.ok()) return stepped.status();
    step = stepped->optimizer.step;
    if (absl::Status s = buffer_->SetLearnerVersion(learner_->version()); !s.ok()) {
      spdlog::warn("learner: {}", s.message());  // the next sample retries the buffer
    }
    if (step % config_.learner.publish_every == 0) RETURN_IF_ERROR(Publish());
    if (config_.learner.checkpoint_every > 0 && step % config_.learner.checkpoint_every == 0) {
      RETURN_IF_ERROR(SaveCheckpoint(step));
    }

    const absl::Time now = absl::Now();
    const double busy_s = stepped->times.compute();
    busy_total += busy_s;
    wait_total += wait_s;
    double lag_sum = 0;
    int64_t lag_n = 0, lag_max = 0;
    for (const auto& [lag, count] : stepped->staleness.lag_counts) {
      lag_sum += static_cast<double>(lag * count);
      lag_n += count;
      lag_max = std::max(lag_max, lag);
    }
    nlohmann::json dropped = {{"learner_stale", stepped->staleness.dropped},
                              {"learner_too_long", stepped->dropped_too_long}};
    int64_t buffer_size = -1, buffer_max = 0;
    if (absl::StatusOr<v1::ServerInfoResponse> info = buffer_->Info(); info.ok()) {
      for (const auto& [reason, count] : info->dropped()) dropped["buffer_" + reason] = count;
      buffer_size = info->size();
      buffer_max = info->max_size();
    }
    nlohmann::json actors = nlohmann::json::object();
    for (const auto& [id, c] : by_actor) {
      actors[id] = {{"trajectories", c.trajectories}, {"max_version", c.max_version}};
    }
    const double reward = batch_size > 0 ? reward_sum / batch_size : 0;
    const double success = batch_size > 0 ? static_cast<double>(successes) / batch_size : 0;
    nlohmann::json line = {
        {"step", step},
        {"version", learner_->version()},
        {"elapsed_s", absl::ToDoubleSeconds(now - start)},
        {"reward_mean", reward},
        {"success_rate", success},
        {"trajectories", batch_size},
        {"loss", stepped->loss},
        {"lr", stepped->optimizer.lr},
        {"grad_norm", stepped->optimizer.grad_norm},
        {"mean_ratio", stepped->diagnostics.mean_ratio()},
        {"mean_is_weight", stepped->diagnostics.mean_is_weight()},
        {"clip_fraction", stepped->diagnostics.clip_fraction()},
        {"trainable_tokens", stepped->diagnostics.tokens},
        {"learner_busy_s", busy_s},
        {"learner_wait_s", wait_s},
        {"lag_mean", lag_n > 0 ? lag_sum / lag_n : 0.0},
        {"lag_max", lag_max},
        {"dropped", dropped},
        {"buffer_size", buffer_size},
        {"actors", actors},
    };
    RETURN_IF_ERROR(run_dir_->AppendMetrics(line));
    ++result.steps;
    result.last_reward = reward;
    result.last_success = success;
    best_success = std::max(best_success, success);
    if (progress.has_value()) {
      progress->Update(ProgressSnapshot{
          .step = step,
          .max_steps = run.max_steps,
          .reward = reward,
          .success = success,
          .learner_utilization = busy_total / std::max(1e-9, absl::ToDoubleSeconds(now - start)),
          .mean_lag = lag_n > 0 ? lag_sum / lag_n : 0.0,
          .buffer_fill = buffer_max > 0 ? static_cast<double>(buffer_size) / buffer_max : 0.0,
          .tokens_per_s = 0,
          .elapsed_seconds = absl::ToDoubleSeconds(now - start)});
    }
  }
  if (progress.has_value()) progress->Finish();
  result.stopped = Stopping();
  result.final_step = step;
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  result.summary = {
      {"mode", "distributed"},
      {"steps", result.steps},
      {"final_step", step},
      {"version", learner_->version()},
      {"wall_seconds", wall},
      {"learner_busy_seconds", busy_total},
      {"learner_wait_seconds", wait_total},
      {"learner_utilization", busy_total / std::max(1e-9, wall)},
      {"last_reward_mean", result.last_reward},
      {"last_success_rate", result.last_success},
      {"best_success_rate", best_success},
      {"stopped", result.stopped},
      {"trajectories_by_actor", actor_trajectories},
  };
  RETURN_IF_ERROR(run_dir_->WriteSummary(result.summary));
  Finish();
  return result;
}

}  // namespace

absl::StatusOr<RemoteLearnerResult> RunRemoteLearner(const JobConfig& config,
                                                     const RemoteLearnerOptions& options) {
  RemoteLearner learner(config, options);
  RETURN_IF_ERROR(learner.Init());
  return learner.Train();
}

}  // namespace flywheel
