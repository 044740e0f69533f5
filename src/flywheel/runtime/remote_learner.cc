#include "flywheel/runtime/remote_learner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/runtime/blas_choice.h"
#include "flywheel/runtime/consumed_log.h"
#include "flywheel/runtime/learner_leases.h"
#include "flywheel/runtime/learner_session.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/warm_start.h"
#include "flywheel/runtime/policy_text.h"
#include "flywheel/runtime/progress.h"
#include "flywheel/runtime/remote_buffer.h"
#include "flywheel/runtime/remote_connect.h"
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

  // The lease protocol (remote_learner.h).
  absl::Status StartLeases();
  // Acknowledges the pending ids and, with `release_others`, releases every other lease of
  // this run except the held ones. OK when the buffer took it.
  absl::Status AcknowledgeLeases(bool release_others);
  // After each trained step, before its checkpoint: pending ids and the consumed.jsonl line.
  absl::Status RecordStep(const TrainedStep& step);
  // A batch that trained nothing (all of it dropped): its ids are pending too, and recorded
  // with the next step.
  void RecordDrops(const BatchDisposition& dropped);
  void ConsumeDisposition(const BatchDisposition& d, bool trained);

  const JobConfig config_;
  const RemoteLearnerOptions options_;
  std::unique_ptr<EnvFactory> factory_;
  std::unique_ptr<LearnerSession> learner_;
  BlasChoice blas_;
  std::unique_ptr<RemoteBuffer> buffer_;
  std::unique_ptr<WeightsServer> weights_;
  std::string lease_owner_;  // the run name; empty without leases
  LearnerLeases leases_;
  std::unique_ptr<ConsumedLog> consumed_log_;
  nlohmann::json unrecorded_drops_ = nlohmann::json::object();  // reason -> ids, for the next line
  int64_t skipped_ = 0;        // delivered again while held, since the last line
  int64_t skipped_total_ = 0;
  int64_t acknowledged_ = 0;   // ids the buffer acknowledged
  size_t staged_ = 0;          // pending ids the checkpoint being written holds
};

absl::Status RemoteLearner::Init() {
  if (config_.run.mode == TrainMode::kElastic) {
    return absl::InvalidArgumentError(
        "run.mode = \"elastic\": the learner is the core of the elastic job; give it "
        "--scheduler-listen HOST:PORT and start `flywheel cell` processes (not actors)");
  }
  ASSIGN_OR_RETURN(factory_, EnvFactory::Create(config_.env));
  // The actors' tokenizer: the model's vocabulary must cover it.
  ASSIGN_OR_RETURN(const PolicyText text, MakePolicyText(config_, *factory_));
  ASSIGN_OR_RETURN(ModelOptions model_options,
                   ResolveModelOptions(config_, *text.tokenizer, text.tokenizer_name));

  // Reach the buffer before creating anything on disk: a wrong address leaves no run behind.
  ASSIGN_OR_RETURN(buffer_, RemoteBuffer::ConnectAsLearner(
                                options_.buffer_address, options_.security,
                                options_.connect_timeout, options_.stop, config_.actor.group_size));

  ASSIGN_OR_RETURN(blas_, ChooseBlasThreads(BlasRole::kLearnerProcess, config_.run.blas_threads,
                                            model_options, config_.learner.token_budget));
  spdlog::info("learner: {}", blas_.DebugString());
  ASSIGN_OR_RETURN(learner_, LearnerSession::Open(config_, model_options, options_.resume,
                                                  options_.group));
  // Before the first publish: actors start from the warm-started weights.
  if (config_.sft.enabled() && learner_->restored_from().empty()) {
    const RunStop stop(/*max_wall_seconds=*/0, options_.stop);  // a signal ends it early
    RETURN_IF_ERROR(
        SupervisedWarmStart(config_, *factory_, text, learner_->model(), &stop).status());
  }
  RETURN_IF_ERROR(StartLeases());
  // The buffer may restart, or the link drop, between the connect and this call: wait for it
  // as at connect (a restarted learner once exited here on "connection reset by peer").
  RETURN_IF_ERROR(WaitForService(
      "buffer", options_.buffer_address, options_.connect_timeout,
      [&] { return buffer_->SetLearnerVersion(learner_->version()); }, options_.stop));

  WeightsServerOptions weights_options;
  weights_options.address = options_.weights_listen;
  weights_options.security = options_.security;
  ASSIGN_OR_RETURN(weights_, WeightsServer::Start(weights_options));
  RETURN_IF_ERROR(Publish());
  if (options_.on_serving) options_.on_serving(weights_->address());
  return absl::OkStatus();
}

absl::Status RemoteLearner::StartLeases() {
  ASSIGN_OR_RETURN(consumed_log_,
                   ConsumedLog::Open(learner_->run_dir().path() / ConsumedLog::kFileName));
  if (!learner_->restored_from().empty()) {
    RETURN_IF_ERROR(consumed_log_->Append({{"resumed_from", learner_->step()}}));
  }
  if (!options_.leases) {
    learner_->SetStepHooks(
        StepHooks{.trained = [this](const TrainedStep& step) { return RecordStep(step); }});
    return absl::OkStatus();
  }
  lease_owner_ = config_.run.name;
  if (!learner_->restored_from().empty()) RETURN_IF_ERROR(leases_.Read(learner_->restored_from()));
  // What the checkpoint trained on is consumed; everything else this run leased (trained after
  // the checkpoint, or never) goes back to the queue. Both must happen before the first sample.
  RETURN_IF_ERROR(WaitForService(
      "buffer", options_.buffer_address, options_.connect_timeout,
      [&] { return AcknowledgeLeases(/*release_others=*/true); }, options_.stop));
  learner_->SetStepHooks(StepHooks{
      .trained = [this](const TrainedStep& step) { return RecordStep(step); },
      .checkpoint_extra =
          [this](const std::string& dir) {
            staged_ = leases_.pending().size();
            return leases_.Write(dir);
          }});
  return absl::OkStatus();
}

absl::Status RemoteLearner::AcknowledgeLeases(bool release_others) {
  v1::AcknowledgeRequest request;
  request.set_lease_owner(lease_owner_);
  // Only what a complete checkpoint holds: a later step may still be rolled back.
  const size_t count = leases_.acknowledgeable();
  for (size_t i = 0; i < count; ++i) {
    const LearnerLeases::Consumed& c = leases_.pending()[i];
    v1::ConsumedTrajectory* consumed = request.add_consumed();
    consumed->set_id(c.id);
    consumed->set_reason(c.reason);
  }
  if (release_others) {
    request.set_release_others(true);
    for (const std::string& id : leases_.held()) request.add_keep(id);
  }
  if (count == 0 && !release_others) return absl::OkStatus();
  ASSIGN_OR_RETURN(v1::AcknowledgeResponse response, buffer_->Acknowledge(request));
  leases_.Acknowledged(count);
  acknowledged_ += static_cast<int64_t>(count);
  if (response.released() > 0) {
    spdlog::info("learner: {} leased trajectories returned to the buffer", response.released());
  }
  return absl::OkStatus();
}

void RemoteLearner::ConsumeDisposition(const BatchDisposition& d, bool trained) {
  if (lease_owner_.empty()) return;
  // Without a step, what was packed was not trained (no trainable token): dropped as such.
  leases_.Consume(d.trained, trained ? "trained" : "learner_untrainable");
  leases_.Consume(d.stale, "learner_stale");
  leases_.Consume(d.too_long, "learner_too_long");
}

void RemoteLearner::RecordDrops(const BatchDisposition& d) {
  ConsumeDisposition(d, /*trained=*/false);
  auto add = [&](const std::vector<std::string>& ids, const char* reason) {
    for (const std::string& id : ids) unrecorded_drops_[reason].push_back(id);
  };
  add(d.trained, "learner_untrainable");
  add(d.stale, "learner_stale");
  add(d.too_long, "learner_too_long");
}

absl::Status RemoteLearner::RecordStep(const TrainedStep& step) {
  ConsumeDisposition(step.disposition, /*trained=*/true);
  nlohmann::json dropped = std::move(unrecorded_drops_);
  unrecorded_drops_ = nlohmann::json::object();
  for (const std::string& id : step.disposition.stale) dropped["learner_stale"].push_back(id);
  for (const std::string& id : step.disposition.too_long) dropped["learner_too_long"].push_back(id);
  nlohmann::json line = {{"step", step.result.optimizer.step},
                         {"trained", step.disposition.trained},
                         {"dropped", std::move(dropped)},
                         {"skipped", skipped_}};
  skipped_ = 0;
  return consumed_log_->Append(std::move(line));
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
    bool failed = false;
    ASSIGN_OR_RETURN(
        std::vector<std::vector<Trajectory>> items,
        buffer_->SampleGroupsOrWait(static_cast<int>(config_.run.batch_groups - groups), kPoll,
                                    options_.connect_timeout, lease_owner_, &failed));
    if (!lease_owner_.empty()) {
      const int64_t skipped = leases_.Admit(items);
      skipped_ += skipped;
      skipped_total_ += skipped;
      // The failed call may have leased items that never arrived: return them (best effort;
      // a buffer that restarted holds no leases anyway).
      if (failed) AcknowledgeLeases(/*release_others=*/true).IgnoreError();
    }
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
    if (absl::IsUnavailable(trained.status())) {  // all of it too stale: fetch more
      RecordDrops(learner_->last_disposition());
      continue;
    }
    if (!trained.ok()) return trained.status();
    step = trained->result.optimizer.step;
    if (trained->checkpointed && !lease_owner_.empty()) {
      // The checkpoint holds the pending ids: the buffer may delete them now.
      leases_.Checkpointed(staged_);
      if (absl::Status s = AcknowledgeLeases(/*release_others=*/false); !s.ok()) {
        spdlog::warn("learner: acknowledging step {}: {} (retried after the next checkpoint)",
                     step, s.message());
      }
    }
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
  if (!lease_owner_.empty()) {
    // The last steps' trajectories are acknowledged only with a checkpoint that contains them.
    if (learner_->step() != learner_->last_checkpoint_step()) {
      // Drops since the last step go into this checkpoint too: on record first.
      if (!unrecorded_drops_.empty()) {
        RETURN_IF_ERROR(consumed_log_->Append(
            {{"dropped_after", learner_->step()}, {"dropped", std::move(unrecorded_drops_)}}));
        unrecorded_drops_ = nlohmann::json::object();
      }
      RETURN_IF_ERROR(learner_->Checkpoint());
      leases_.Checkpointed(staged_);
    }
    if (absl::Status s = AcknowledgeLeases(/*release_others=*/false); !s.ok()) {
      spdlog::warn("learner: acknowledging the last checkpoint: {} (a --resume acknowledges it)",
                   s.message());
    }
  }
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
      {"leases",
       {{"enabled", !lease_owner_.empty()},
        {"acknowledged", acknowledged_},
        {"pending", leases_.pending().size()},
        {"skipped_redelivered", skipped_total_}}},
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
  ASSIGN_OR_RETURN(const PolicyText text, MakePolicyText(config, *factory));
  ASSIGN_OR_RETURN(ModelOptions model_options,
                   ResolveModelOptions(config, *text.tokenizer, text.tokenizer_name));
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
