#include "flywheel/runtime/embedded_job.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "absl/time/clock.h"
#include "flywheel/actor/actor.h"
#include "flywheel/actor/actor_metrics.h"
#include "flywheel/actor/actor_threads.h"
#include "flywheel/buffer/buffer.h"
#include "flywheel/core/emulated_device.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/dist/communicator.h"
#include "flywheel/elastic/elastic_job.h"
#include "flywheel/env/env_executor.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/env/task_source.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/observe/trace_recorder.h"
#include "flywheel/runtime/blas_choice.h"
#include "flywheel/runtime/latency_audit.h"
#include "flywheel/runtime/learner_session.h"
#include "flywheel/runtime/policy_eval.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/policy_text.h"
#include "flywheel/runtime/progress.h"
#include "flywheel/runtime/run_stop.h"
#include "flywheel/runtime/warm_start.h"
#include "flywheel/scheduler/elastic_control.h"

namespace flywheel {
namespace {

// How long one blocking call waits before the loop rechecks whether to stop.
constexpr absl::Duration kPoll = absl::Milliseconds(200);

ActorStats SumStats(const std::vector<std::unique_ptr<Actor>>& actors) {
  ActorStats sum;
  for (const auto& actor : actors) {
    const ActorStats s = actor->stats();
    sum.episodes_finished += s.episodes_finished;
    sum.episodes_failed += s.episodes_failed;
    sum.episodes_timed_out += s.episodes_timed_out;
    sum.tokens_generated += s.tokens_generated;
    sum.generation_seconds += s.generation_seconds;
    sum.env_wait_seconds += s.env_wait_seconds;
    sum.insert_wait_seconds += s.insert_wait_seconds;
  }
  return sum;
}

// The name of learner.sharding's value, for the summary.
std::string ShardingName(ShardingMode mode) {
  for (const auto& choice : kShardingModeNames) {
    if (choice.value == mode) return std::string(choice.name);
  }
  return "?";
}

// Everything the job owns, destroyed in an order that lets in-flight work end: actors stop and
// join before the executor, the buffer and the environments they use go away.
class Job {
 public:
  explicit Job(const JobConfig& config) : config_(config) {}
  ~Job() {
    Shutdown();
    learner_.reset();  // rank 0 of a group that did not finish tells the other ranks to stop
    JoinFollowers().IgnoreError();
  }

  absl::Status Init(const EmbeddedJobOptions& options);
  absl::StatusOr<EmbeddedJobResult> Train(const EmbeddedJobOptions& options);

 private:
  absl::Status Sink(Trajectory t);
  absl::Status Publish();
  absl::Status GenerateOneBatch(const RunStop& stop);  // colocated
  // Joins the threads of the last colocated generation; their first error.
  absl::Status JoinGeneration();
  // run.oversample: cuts the episodes still running once a batch is complete (dropped), and
  // after the batch is taken drops what else is in the buffer.
  absl::Status CutOverSampled();
  absl::Status DropOverSampled();
  // Up to batch_groups groups, counted into `groups`; fewer only when stopping.
  absl::StatusOr<std::vector<Trajectory>> CollectBatch(const RunStop& stop, int64_t* groups);
  // Episodes the actors may still start under run.max_pipeline_batches.
  int64_t AdmissionRoom() const;
  void Shutdown();
  // learner.world_size > 1: starts ranks 1..N-1 as threads and joins rank 0's communicator.
  absl::Status StartGroup(const ModelOptions& model_options, bool resume);
  // Waits for ranks 1..N-1; the first error of one of them.
  absl::Status JoinFollowers();

  const JobConfig config_;
  std::unique_ptr<EnvFactory> factory_;
  std::unique_ptr<EnvExecutor> executor_;
  PolicyText text_;  // the tokenizer and turn format every actor borrows
  // learner.world_size > 1: rank 0's communicator (outlives learner_) and ranks 1..N-1.
  std::unique_ptr<dist::Communicator> group_;
  std::vector<std::thread> followers_;
  std::vector<absl::Status> follower_status_;
  std::unique_ptr<LearnerSession> learner_;
  std::optional<WarmStartResult> warm_start_;  // [sft] ran before the first step
  absl::Time start_;                           // Init's start: the run's wall clock
  BlasChoice blas_;
  std::unique_ptr<Buffer> buffer_;
  std::vector<std::unique_ptr<TaskSource>> tasks_;
  std::vector<std::unique_ptr<Actor>> actors_;
  ActorThreads actor_threads_;              // async: every actor runs open-ended
  scheduler::PipelineAdmission admission_;  // run.max_pipeline_batches; off when 0
  std::atomic<bool> stopping_{false};
  // colocated: the threads of a step's generation (one per actor, then the cut's) and their
  // statuses. An over-sampled cut outlives GenerateOneBatch, overlapping the learner's step.
  struct {
    std::vector<std::thread> threads;
    std::vector<absl::Status> statuses;
  } generation_;
  absl::Mutex generation_mu_;
  int64_t generation_running_ ABSL_GUARDED_BY(generation_mu_) = 0;  // actors still in Run
  struct {
    int64_t episodes_cut = 0;        // running when their step's batch was complete
    int64_t groups_dropped = 0;      // complete, beyond the batch
    int64_t incomplete_dropped = 0;  // trajectories of groups still missing members
  } oversample_;                     // colocated with run.oversample, over the run
};

absl::Status Job::Init(const EmbeddedJobOptions& options) {
  start_ = absl::Now();
  ASSIGN_OR_RETURN(factory_, EnvFactory::Create(config_.env));
  executor_ = std::make_unique<EnvExecutor>(EnvExecutor::OptionsFor(config_.env));
  ASSIGN_OR_RETURN(text_, MakePolicyText(config_, *factory_));
  ASSIGN_OR_RETURN(ModelOptions model_options,
                   ResolveModelOptions(config_, *text_.tokenizer, text_.tokenizer_name));
  ASSIGN_OR_RETURN(blas_, ChooseBlasThreads(BlasRole::kEmbedded, config_.run.blas_threads,
                                            model_options, config_.learner.token_budget));
  spdlog::info("{}", blas_.DebugString());
  if (config_.learner.world_size > 1) RETURN_IF_ERROR(StartGroup(model_options, options.resume));
  ASSIGN_OR_RETURN(learner_,
                   LearnerSession::Open(config_, model_options, options.resume, group_.get()));
  if (config_.sft.enabled() && learner_->restored_from().empty()) {
    // Within the run's budget and stop signal, as its training is.
    const RunStop stop(config_.run.max_wall_seconds, options.stop, start_);
    ASSIGN_OR_RETURN(warm_start_,
                     SupervisedWarmStart(config_, *factory_, text_, learner_->model(), &stop));
  }

  BufferOptions buffer_options = config_.buffer;
  buffer_options.group_size = config_.actor.group_size;
  buffer_options.min_group_size = std::min(buffer_options.min_group_size, config_.actor.group_size);
  buffer_options.durable = false;   // the embedded job keeps its buffer in memory
  buffer_options.remember_ids = 0;  // and no insert is retried in process: no ids to remember
  if (buffer_options.max_staleness < 0)
    buffer_options.max_staleness = config_.learner.max_staleness;
  // colocated: one whole batch must fit while the learner has not sampled yet (over-sampled: every
  // group started, since those that end while the rest is cut are dropped only afterwards).
  buffer_options.max_size = std::max(buffer_options.max_size, config_.run.colocated_groups());
  if (config_.run.mode == TrainMode::kAsync && config_.run.max_pipeline_batches > 0) {
    admission_ = scheduler::PipelineAdmission::For(
        config_.run.max_pipeline_batches, config_.run.batch_groups, config_.actor.group_size);
    // Admission, not backpressure, bounds the pipeline: whatever was admitted must fit.
    buffer_options.max_size =
        std::max(buffer_options.max_size, admission_.groups + config_.actor.num_actors);
  }
  ASSIGN_OR_RETURN(buffer_, Buffer::Create(buffer_options));
  buffer_->SetLearnerVersion(learner_->version());

  ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> snapshot, learner_->Snapshot());
  for (int64_t i = 0; i < config_.actor.num_actors; ++i) {
    // Distinct task streams per actor; a resumed run sees new tasks.
    const uint64_t seed = static_cast<uint64_t>(config_.run.seed) * 1000003u + i * 7919u +
                          static_cast<uint64_t>(learner_->version()) * 104729u;
    tasks_.push_back(
        std::make_unique<TaskSource>(factory_->task_name(), seed, config_.actor.group_size));
    ASSIGN_OR_RETURN(std::unique_ptr<RolloutEngine> engine,
                     RolloutEngine::Create(config_.actor.engine, snapshot));
    actors_.push_back(std::make_unique<Actor>(
        StrCat("actor-", i), config_.actor, config_.sampling, std::move(engine), factory_.get(),
        executor_.get(), text_.tokenizer.get(), tasks_.back().get(),
        [this](Trajectory t) { return Sink(std::move(t)); }, seed + 1, text_.turn_format.get()));
    if (admission_.enabled()) {
      actors_.back()->SetAdmission([this] { return AdmissionRoom(); });
    }
  }
  return absl::OkStatus();
}

absl::Status Job::StartGroup(const ModelOptions& model_options, bool resume) {
  const int world_size = static_cast<int>(config_.learner.world_size);
  // The ranks are threads of this process: an in-memory store instead of a rendezvous.
  auto store = c10::make_intrusive<c10d::HashStore>();
  follower_status_.resize(world_size);
  for (int rank = 1; rank < world_size; ++rank) {
    followers_.emplace_back([this, store, rank, model_options, resume] {
      follower_status_[rank] = RunFollowerRank(store, rank, config_, model_options, resume);
    });
  }
  // This thread is rank 0, with one intra-op thread like the others.
  torch::set_num_threads(1);
  spdlog::info("learner group of {} ranks (threads), learner.sharding = {}", world_size,
               ShardingName(config_.learner.sharding));
  dist::CommunicatorOptions group_options;
  group_options.name = "embedded learner group";
  ASSIGN_OR_RETURN(group_, dist::Communicator::Create(store, 0, world_size, group_options));
  return absl::OkStatus();
}

absl::Status Job::JoinFollowers() {
  for (std::thread& t : followers_) t.join();
  followers_.clear();
  for (size_t rank = 1; rank < follower_status_.size(); ++rank) {
    if (!follower_status_[rank].ok()) {
      return Annotate(follower_status_[rank], StrCat("learner rank ", rank));
    }
  }
  return absl::OkStatus();
}

int64_t Job::AdmissionRoom() const {
  // The pipeline: episodes being played plus finished ones the learner has not taken yet. Its
  // depth in learner batches is about how many versions old the data is when trained on (with
  // a fixed episodes_in_flight, data also ages in the buffer and behind a blocked actor).
  const int64_t group = config_.actor.group_size;
  const BufferInfo info = buffer_->Info();
  int64_t occupancy = info.pending_members + info.table.size * group;
  for (const auto& actor : actors_) occupancy += actor->in_flight();
  return admission_.Room(occupancy);
}

absl::Status Job::Sink(Trajectory t) {
  auto trajectory = std::make_shared<const Trajectory>(std::move(t));
  while (true) {
    if (stopping_.load()) return absl::CancelledError("the job is stopping");
    absl::Status status = buffer_->Insert(trajectory, absl::Now() + kPoll);
    if (!absl::IsDeadlineExceeded(status)) return status;  // backpressure: try again
  }
}

absl::Status Job::Publish() {
  TraceSpan span("learner", "publish");
  ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> snapshot, learner_->Snapshot());
  for (const auto& actor : actors_) actor->PublishSnapshot(snapshot);
  return absl::OkStatus();
}

absl::Status Job::GenerateOneBatch(const RunStop& stop) {
  // The previous step's generation may still be ending (an over-sampled cut): join it and drop
  // what it left, so that this step's batch is made of this step's groups only.
  RETURN_IF_ERROR(JoinGeneration());
  if (config_.run.oversample > 0) RETURN_IF_ERROR(DropOverSampled());
  // Whole groups per actor, so every group is complete when Run returns. With run.oversample
  // the actors start more groups than the batch, and once the buffer holds a batch of complete
  // ones the rest are cut: the slowest groups of a heavy-tailed environment are not waited for.
  const int64_t want = config_.run.batch_groups;
  const bool oversampling = config_.run.oversample > 0;
  const int64_t total = config_.run.colocated_groups();
  const int64_t n = static_cast<int64_t>(actors_.size());
  generation_.statuses.assign(actors_.size() + 1, absl::OkStatus());  // the last: the cut's
  for (int64_t i = 0; i < n; ++i) {
    const int64_t groups = total / n + (i < total % n);
    if (groups == 0) continue;
    {
      absl::MutexLock lock(&generation_mu_);
      ++generation_running_;
    }
    generation_.threads.emplace_back([this, i, groups] {
      generation_.statuses[i] = actors_[i]->Run(groups * config_.actor.group_size);
      absl::MutexLock lock(&generation_mu_);
      --generation_running_;
    });
  }
  bool cut = false;
  {
    absl::MutexLock lock(&generation_mu_);
    auto done = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return generation_running_ == 0; };
    // Over-sampling looks at the buffer often: the batch is full when its last group completes.
    const absl::Duration poll = oversampling ? absl::Milliseconds(2) : kPoll;
    while (!generation_mu_.AwaitWithTimeout(absl::Condition(&done), poll)) {
      if (stop.Reached()) break;
      if (oversampling && buffer_->Info().table.size >= want) {
        cut = true;
        break;
      }
    }
  }
  if (stop.Reached()) {  // the batch is abandoned: its episodes are cancelled
    for (const auto& actor : actors_) actor->Stop();
    JoinGeneration().IgnoreError();
    return absl::OkStatus();
  }
  if (!cut) return JoinGeneration();
  // The cut waits for the environment calls in flight (Suspend): it overlaps the learner's step
  // and the next step joins it.
  generation_.threads.emplace_back([this] { generation_.statuses.back() = CutOverSampled(); });
  return absl::OkStatus();
}

absl::Status Job::JoinGeneration() {
  for (std::thread& t : generation_.threads) t.join();
  generation_.threads.clear();
  absl::Status first;
  for (const absl::Status& s : generation_.statuses) first.Update(s);
  generation_.statuses.clear();
  return first;
}

absl::Status Job::CutOverSampled() {
  // Suspend ends each actor's Run with every episode at its next environment boundary (a reply
  // that ends an episode still reaches the buffer, to be dropped with the rest); the suspended
  // episodes are dropped here. The actors are cut in parallel: each waits for its slowest
  // environment call in flight.
  std::vector<absl::StatusOr<ActorSwitch>> switches(actors_.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < actors_.size(); ++i) {
    threads.emplace_back([this, i, &switches] { switches[i] = actors_[i]->Suspend(); });
  }
  for (std::thread& t : threads) t.join();
  for (absl::StatusOr<ActorSwitch>& s : switches) {
    RETURN_IF_ERROR(s.status());
    oversample_.episodes_cut += static_cast<int64_t>(s->episodes.size());
  }
  return absl::OkStatus();
}

absl::Status Job::DropOverSampled() {
  // The last batch is taken; what else finished, and the groups still missing members, go.
  ASSIGN_OR_RETURN(const int64_t incomplete, buffer_->DiscardPendingGroups());
  oversample_.incomplete_dropped += incomplete;
  while (true) {  // until the table is empty: a sample that would have to wait
    absl::StatusOr<std::vector<SampledItem>> items =
        buffer_->Sample(config_.run.colocated_groups(), absl::Now());
    if (absl::IsDeadlineExceeded(items.status())) return absl::OkStatus();
    if (!items.ok()) return items.status();
    oversample_.groups_dropped += static_cast<int64_t>(items->size());
  }
}

absl::StatusOr<std::vector<Trajectory>> Job::CollectBatch(const RunStop& stop,
                                                          int64_t* groups_out) {
  std::vector<Trajectory> batch;
  int64_t& groups = *groups_out;
  while (groups < config_.run.batch_groups && !stop.Reached()) {
    absl::StatusOr<std::vector<SampledItem>> items =
        buffer_->Sample(config_.run.batch_groups - groups, absl::Now() + kPoll);
    if (absl::IsDeadlineExceeded(items.status())) {
      RETURN_IF_ERROR(actor_threads_.FirstError());
      continue;
    }
    if (!items.ok()) return items.status();
    for (const SampledItem& sampled : *items) {
      for (const ItemMember& member : sampled.item->members) batch.push_back(*member.trajectory);
      ++groups;
    }
  }
  return batch;
}

void Job::Shutdown() {
  stopping_.store(true);
  if (buffer_ != nullptr) buffer_->Close();
  actor_threads_.Stop();
  if (!generation_.threads.empty()) {  // a colocated cut still waiting for its episodes
    for (const auto& actor : actors_) actor->Stop();
    JoinGeneration().IgnoreError();
  }
  // A hung environment process must not hold the stop: calls still running are interrupted.
  if (executor_ != nullptr) executor_->Close([this] { factory_->Interrupt(); });
}

absl::StatusOr<EmbeddedJobResult> Job::Train(const EmbeddedJobOptions& options) {
  const RunOptions& run = config_.run;
  const bool async = run.mode == TrainMode::kAsync;
  std::optional<ProgressReporter> progress;
  if (options.progress != nullptr) {
    progress.emplace(options.progress, options.progress_is_terminal, absl::Seconds(10));
  }
  // From Init: run.max_wall_seconds and the curves' wall time include the warm start.
  const absl::Time start = start_;
  const std::vector<int64_t> env_steps_at_start =
      ActorMetrics::Get().env_step_seconds->BucketCounts();
  const RunStop stop(run.max_wall_seconds, options.stop, start);
  TraceRecorder::SetThreadLabel("learner");
  if (async) actor_threads_.Start(actors_);

  EmbeddedJobResult result;
  int64_t consumed = 0;
  int64_t groups_trained = 0;  // handed to the learner: trained on, or dropped with a reason
  ActorStats last_stats;
  absl::Time last_time = start;
  int64_t step = learner_->step();
  while (step < run.max_steps && !stop.Reached()) {
    const absl::Time wait_start = absl::Now();
    int64_t batch_groups = 0;
    std::vector<Trajectory> batch;
    {
      TraceSpan span("learner", "sample");  // the learner's wait_data
      if (!async) RETURN_IF_ERROR(GenerateOneBatch(stop));
      ASSIGN_OR_RETURN(batch, CollectBatch(stop, &batch_groups));
    }
    // Stopping: the groups already taken from the buffer are trained on, not thrown away.
    if (batch.empty()) break;
    const int64_t batch_size = static_cast<int64_t>(batch.size());
    groups_trained += batch_groups;
    absl::StatusOr<TrainedStep> trained =
        learner_->Step(std::move(batch), absl::Now() - wait_start);
    if (absl::IsUnavailable(trained.status())) continue;  // all of it too stale: fetch more
    if (!trained.ok()) return trained.status();
    step = trained->result.optimizer.step;
    consumed += batch_size;
    buffer_->SetLearnerVersion(learner_->version());
    if (learner_->PublishDue(step)) RETURN_IF_ERROR(Publish());
    for (const auto& actor : actors_) actor->Wake();  // the batch taken made room

    const absl::Time now = absl::Now();
    const double elapsed = absl::ToDoubleSeconds(now - start);
    const ActorStats stats = SumStats(actors_);
    const double dt = std::max(1e-9, absl::ToDoubleSeconds(now - last_time));
    const double tokens_per_s = (stats.tokens_generated - last_stats.tokens_generated) / dt;
    last_stats = stats;
    last_time = now;
    const BufferInfo info = buffer_->Info();
    nlohmann::json line = trained->MetricsLine(learner_->version(), elapsed);
    line["dropped"] = {{"learner_stale", trained->result.staleness.dropped},
                       {"learner_too_long", trained->result.dropped_too_long},
                       {"buffer_stale", info.dropped_stale},
                       {"buffer_incomplete_group", info.dropped_incomplete_group},
                       {"buffer_late_group_member", info.dropped_late_group_member},
                       {"buffer_evicted", info.dropped_evicted}};
    line["buffer_size"] = info.table.size;
    line["tokens_per_s"] = tokens_per_s;
    line["episodes_failed"] = stats.episodes_failed;
    RETURN_IF_ERROR(learner_->run_dir().AppendMetrics(line));
    ++result.steps;
    result.last_reward = trained->reward_mean;
    result.last_success = trained->success_rate;
    result.best_success = std::max(result.best_success, trained->success_rate);
    if (progress.has_value()) {
      const double fill = info.table.max_size > 0
                              ? static_cast<double>(info.table.size) / info.table.max_size
                              : 0.0;
      progress->Update(learner_->Progress(*trained, elapsed, fill, tokens_per_s));
    }
  }
  if (progress.has_value()) progress->Finish();
  if (!async && run.oversample > 0 && !stop.Reached()) {
    // The last step's cut ends, and what it left is dropped as after every step.
    RETURN_IF_ERROR(JoinGeneration());
    RETURN_IF_ERROR(DropOverSampled());
  }
  const std::string_view stopped_by = step >= run.max_steps ? "max_steps" : stop.Reason();
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  Shutdown();
  const BufferInfo info = buffer_->Info();
  const ActorStats stats = SumStats(actors_);
  result.final_step = step;

  LatencyAuditInput audit_input;
  audit_input.wall_seconds = wall;
  audit_input.learner_busy_seconds = learner_->busy_seconds();
  audit_input.learner_wait_seconds = learner_->wait_seconds();
  audit_input.actor_threads = config_.actor.num_actors;
  audit_input.generation_seconds = stats.generation_seconds;
  audit_input.env_wait_seconds = stats.env_wait_seconds;
  audit_input.insert_wait_seconds = stats.insert_wait_seconds;
  audit_input.episodes_in_flight = config_.actor.num_actors * config_.actor.episodes_in_flight;
  audit_input.samples_consumed = consumed;
  audit_input.samples_produced = info.inserted;
  const LatencyAudit audit = AuditLatency(audit_input);
  result.summary = {
      {"mode", async ? "async" : "colocated"},
      {"steps", result.steps},
      {"final_step", step},
      {"version", learner_->version()},
      {"wall_seconds", wall},
      {"last_reward_mean", result.last_reward},
      {"last_success_rate", result.last_success},
      {"best_success_rate", result.best_success},
      {"episodes_finished", stats.episodes_finished},
      {"episodes_failed", stats.episodes_failed},
      {"episodes_timed_out", stats.episodes_timed_out},
      {"tokens_generated", stats.tokens_generated},
      {"latency_audit", audit.ToJson()},
      {"env_step_seconds", ActorMetrics::Get().EnvStepSecondsSince(env_steps_at_start)},
      {"verdict", audit.Verdict()},
      {"stopped_by", std::string(stopped_by)},
      {"blas", blas_.ToJson()},
      {"world_size", learner_->world_size()},
      {"sharding", ShardingName(config_.learner.sharding)},
      // Every group the buffer handed out was given to the learner; the rest is counted here.
      {"groups",
       {{"sampled", info.sampled},
        {"trained", groups_trained},
        {"left_in_buffer", info.table.size},
        {"dropped_stale", info.dropped_stale},
        {"dropped_incomplete", info.dropped_incomplete_group},
        {"dropped_evicted", info.dropped_evicted}}},
  };
  if (run.oversample > 0) {
    result.summary["oversample"] = {{"fraction", run.oversample},
                                    {"episodes_cut", oversample_.episodes_cut},
                                    {"groups_dropped", oversample_.groups_dropped},
                                    {"incomplete_dropped", oversample_.incomplete_dropped}};
  }
  if (warm_start_.has_value()) {
    result.summary["sft"] = {
        {"steps", warm_start_->steps},         {"stopped", warm_start_->stopped},
        {"episodes", warm_start_->episodes},   {"expert_reward", warm_start_->expert_reward},
        {"first_nll", warm_start_->first_nll}, {"last_nll", warm_start_->last_nll}};
  }
  // A stop request skips the evaluation (the user asked to stop); a wall budget does not.
  if (run.eval_episodes > 0 && stopped_by != "signal") {
    // The final policy on tasks of their own (derived from run.seed alone), so two runs of the same
    // seed are evaluated on the same episodes.
    ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> weights, learner_->Snapshot());
    ASSIGN_OR_RETURN(PolicyEvalResult eval,
                     EvaluatePolicy(config_, *factory_, text_, std::move(weights),
                                    run.eval_episodes, static_cast<uint64_t>(run.seed)));
    result.eval = eval;
    result.summary["eval"] = eval.ToJson();
  }
  RETURN_IF_ERROR(learner_->Finish());
  RETURN_IF_ERROR(JoinFollowers());
  RETURN_IF_ERROR(learner_->run_dir().WriteSummary(result.summary));
  return result;
}

}  // namespace

absl::StatusOr<EmbeddedJobResult> RunEmbeddedJob(const JobConfig& config,
                                                 const EmbeddedJobOptions& options) {
  SetEmulatedSlowdown(config.run.emulated_slowdown);
  const TraceRecording trace(config.run.trace, config.run.trace_spans_per_track);
  if (config.run.mode == TrainMode::kElastic) return RunElasticJob(config, options);
  Job job(config);
  RETURN_IF_ERROR(job.Init(options));
  return job.Train(options);
}

}  // namespace flywheel
