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
#include "flywheel/runtime/blas_choice.h"
#include "flywheel/runtime/learner_session.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/progress.h"
#include "flywheel/runtime/remote_buffer.h"
#include "flywheel/runtime/run_stop.h"
#include "flywheel/weights/service.h"

namespace flywheel {
namespace {

// How long one sample request waits before the loop rechecks whether to stop.
constexpr absl::Duration kPoll = absl::Milliseconds(200);

// Per actor (Trajectory::actor_id): what the last batch held from it.
struct ActorContribution {
  int64_t trajectories = 0;
  int64_t max_version = -1;
};

class RemoteLearner {
 public:
  RemoteLearner(const JobConfig& config, const RemoteLearnerOptions& options)
      : config_(config), options_(options) {}

  absl::Status Init();
  absl::StatusOr<RemoteLearnerResult> Train();

 private:
  bool Stopping() const { return options_.stop != nullptr && options_.stop->load(); }
  // Up to batch_groups groups; fewer only when stopping.
  absl::StatusOr<std::vector<Trajectory>> CollectBatch(const RunStop& stop);
  absl::Status Publish();
  void Finish();

  const JobConfig config_;
  const RemoteLearnerOptions options_;
  std::unique_ptr<EnvFactory> factory_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<LearnerSession> learner_;
  BlasChoice blas_;
  std::unique_ptr<RemoteBuffer> buffer_;
  std::unique_ptr<WeightsServer> weights_;
};

absl::Status RemoteLearner::Init() {
  if (config_.run.mode == TrainMode::kElastic) {
    return absl::InvalidArgumentError(
        "run.mode = \"elastic\": the learner is the core of the elastic job; give it "
        "--scheduler-listen HOST:PORT and start `flywheel cell` processes (not actors)");
  }
  ASSIGN_OR_RETURN(factory_, EnvFactory::Create(config_.env));
  ASSIGN_OR_RETURN(tokenizer_, MakeTokenizer(factory_->vocabulary()));
  ASSIGN_OR_RETURN(ModelOptions model_options,
                   ResolveModelOptions(config_, *tokenizer_, factory_->task_name()));

  // Reach the buffer before creating anything on disk: a wrong address leaves no run behind.
  ASSIGN_OR_RETURN(buffer_, RemoteBuffer::ConnectAsLearner(
                                options_.buffer_address, options_.security,
                                options_.connect_timeout, options_.stop, config_.actor.group_size));

  ASSIGN_OR_RETURN(blas_, ChooseBlasThreads(BlasRole::kLearnerProcess, config_.run.blas_threads,
                                            model_options, config_.learner.token_budget));
  spdlog::info("learner: {}", blas_.DebugString());
  ASSIGN_OR_RETURN(learner_, LearnerSession::Open(config_, model_options, options_.resume,
                                                  options_.group));
  RETURN_IF_ERROR(buffer_->SetLearnerVersion(learner_->version()));

  WeightsServerOptions weights_options;
  weights_options.address = options_.weights_listen;
  weights_options.security = options_.security;
  ASSIGN_OR_RETURN(weights_, WeightsServer::Start(weights_options));
  RETURN_IF_ERROR(Publish());
  if (options_.on_serving) options_.on_serving(weights_->address());
  return absl::OkStatus();
}

absl::Status RemoteLearner::Publish() {
  ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> snapshot, learner_->Snapshot());
  return weights_->Publish(*snapshot);
}

absl::StatusOr<std::vector<Trajectory>> RemoteLearner::CollectBatch(const RunStop& stop) {
  std::vector<Trajectory> batch;
  int64_t groups = 0;
  while (groups < config_.run.batch_groups && !stop.Reached()) {
    // A restarting or unreachable buffer is waited for connect_timeout.
    ASSIGN_OR_RETURN(
        std::vector<std::vector<Trajectory>> items,
        buffer_->SampleGroupsOrWait(static_cast<int>(config_.run.batch_groups - groups), kPoll,
                                    options_.connect_timeout));
    for (std::vector<Trajectory>& group : items) {
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
  const RunStop stop(run.max_wall_seconds, options_.stop, start);
  RemoteLearnerResult result;
  double best_success = 0;
  std::map<std::string, int64_t> actor_trajectories;  // over the whole run
  int64_t step = learner_->step();
  while (step < run.max_steps && !stop.Reached()) {
    const absl::Time wait_start = absl::Now();
    ASSIGN_OR_RETURN(std::vector<Trajectory> batch, CollectBatch(stop));
    // Stopping: the groups already taken from the buffer are trained on, not thrown away.
    if (batch.empty()) break;
    std::map<std::string, ActorContribution> by_actor;
    for (const Trajectory& t : batch) {
      ActorContribution& c = by_actor[t.actor_id];
      ++c.trajectories;
      c.max_version = std::max(c.max_version, t.MaxVersion());
      ++actor_trajectories[t.actor_id];
    }
    absl::StatusOr<TrainedStep> trained =
        learner_->Step(std::move(batch), absl::Now() - wait_start);
    if (absl::IsUnavailable(trained.status())) continue;  // all of it too stale: fetch more
    if (!trained.ok()) return trained.status();
    step = trained->result.optimizer.step;
    if (absl::Status s = buffer_->SetLearnerVersion(learner_->version()); !s.ok()) {
      spdlog::warn("learner: {}", s.message());  // the next sample retries the buffer
    }
    if (learner_->PublishDue(step)) RETURN_IF_ERROR(Publish());

    const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
    nlohmann::json dropped = {{"learner_stale", trained->result.staleness.dropped},
                              {"learner_too_long", trained->result.dropped_too_long}};
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
    nlohmann::json line = trained->MetricsLine(learner_->version(), elapsed);
    line["dropped"] = dropped;
    line["buffer_size"] = buffer_size;
    line["actors"] = actors;
    RETURN_IF_ERROR(learner_->run_dir().AppendMetrics(line));
    ++result.steps;
    result.last_reward = trained->reward_mean;
    result.last_success = trained->success_rate;
    best_success = std::max(best_success, trained->success_rate);
    if (progress.has_value()) {
      const double fill = buffer_max > 0 ? static_cast<double>(buffer_size) / buffer_max : 0.0;
      progress->Update(learner_->Progress(*trained, elapsed, fill, /*tokens_per_s=*/0));
    }
  }
  if (progress.has_value()) progress->Finish();
  result.stopped = Stopping();
  result.final_step = step;
  const std::string stopped_by(step >= run.max_steps ? "max_steps" : stop.Reason());
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  result.summary = {
      {"mode", "distributed"},
      {"steps", result.steps},
      {"final_step", step},
      {"version", learner_->version()},
      {"wall_seconds", wall},
      {"learner_busy_seconds", learner_->busy_seconds()},
      {"learner_wait_seconds", learner_->wait_seconds()},
      {"learner_utilization", learner_->busy_seconds() / std::max(1e-9, wall)},
      {"last_reward_mean", result.last_reward},
      {"last_success_rate", result.last_success},
      {"best_success_rate", best_success},
      {"stopped", result.stopped},
      {"blas", blas_.ToJson()},
      {"world_size", learner_->world_size()},
      {"stopped_by", stopped_by},
      {"trajectories_by_actor", actor_trajectories},
  };
  // The other ranks end with this run; a rank that died makes this fail (no summary).
  RETURN_IF_ERROR(learner_->Finish());
  RETURN_IF_ERROR(learner_->run_dir().WriteSummary(result.summary));
  Finish();
  return result;
}

// A rank > 0 of the learner group: the model and a LearnerSession, no buffer, no weights.
absl::StatusOr<RemoteLearnerResult> FollowRankZero(const JobConfig& config,
                                                   const RemoteLearnerOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<EnvFactory> factory, EnvFactory::Create(config.env));
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, MakeTokenizer(factory->vocabulary()));
  ASSIGN_OR_RETURN(ModelOptions model_options,
                   ResolveModelOptions(config, *tokenizer, factory->task_name()));
  ASSIGN_OR_RETURN(BlasChoice blas,
                   ChooseBlasThreads(BlasRole::kLearnerProcess, config.run.blas_threads,
                                     model_options, config.learner.token_budget));
  spdlog::info("learner rank {}: {}", options.group->rank(), blas.DebugString());
  ASSIGN_OR_RETURN(std::unique_ptr<LearnerSession> session,
                   LearnerSession::Open(config, model_options, options.resume, options.group));
  const int64_t first = session->step();
  RETURN_IF_ERROR(session->Follow());
  RemoteLearnerResult result;
  result.final_step = session->step();
  result.steps = result.final_step - first;
  return result;
}

}  // namespace

absl::StatusOr<RemoteLearnerResult> RunRemoteLearner(const JobConfig& config,
                                                     const RemoteLearnerOptions& options) {
  if (options.group != nullptr && options.group->rank() > 0) return FollowRankZero(config, options);
  RemoteLearner learner(config, options);
  RETURN_IF_ERROR(learner.Init());
  return learner.Train();
}

}  // namespace flywheel
