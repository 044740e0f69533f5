#include "flywheel/elastic/elastic_core.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "absl/time/clock.h"
#include "flywheel/core/emulated_device.h"
#include "flywheel/core/host_port.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/dist/rendezvous.h"
#include "flywheel/elastic/elastic_cell.h"
#include "flywheel/elastic/scheduler_service.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/learner/trainer_state.h"
#include "flywheel/model/safetensors.h"
#include "flywheel/runtime/learner_group.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/policy_text.h"
#include "flywheel/runtime/progress.h"
#include "flywheel/runtime/remote_buffer.h"
#include "flywheel/runtime/transformer_policy.h"
#include "flywheel/weights/service.h"

namespace flywheel {
namespace {

// How long one blocking call waits before its loop rechecks whether to stop.
constexpr absl::Duration kCorePoll = absl::Milliseconds(100);

// Where core cell `core` of `cores` keeps its optimiser shard in a checkpoint: the checkpoint's
// own directory for one core (as every other job writes it), core-<i>/ for several.
std::string CoreStateDir(const std::string& checkpoint, int core, int cores) {
  return cores == 1 ? checkpoint : StrCat(checkpoint, "/core-", core);
}

RunningStep RunningStepOf(const StepReport& report) {
  int64_t done = 0;
  for (const auto& [cell, ids] : report.ran_by) done += static_cast<int64_t>(ids.size());
  return {.episodes = report.complete ? 0 : report.kept,
          .tokens = report.complete ? 0 : report.trainable_tokens,
          .micro_steps = report.micro_steps,
          .done = done};
}

}  // namespace

absl::Status CheckElasticConfig(const JobConfig& config) {
  if (config.learner.max_staleness < 0) {
    return absl::InvalidArgumentError(
        "run.mode = \"elastic\" admits the episodes of batches up to learner.max_staleness "
        "versions ahead of the learner; set learner.max_staleness >= 0 (0 = on-policy)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ElasticCore>> ElasticCore::Create(const JobConfig& config,
                                                                 CoreLinks links) {
  std::unique_ptr<ElasticCore> core(new ElasticCore(config, std::move(links)));
  RETURN_IF_ERROR(core->Init());
  return core;
}

ElasticCore::~ElasticCore() { Shutdown(); }

void ElasticCore::Fail(absl::Status status) {
  if (status.ok()) return;
  {
    absl::MutexLock lock(&mu_);
    if (first_error_.ok()) first_error_ = std::move(status);
  }
  stopping_.store(true);
  queue_->Cancel();
}

absl::Status ElasticCore::FirstError() const {
  absl::MutexLock lock(&mu_);
  return first_error_;
}

absl::Status ElasticCore::Init() {
  const SchedulerOptions& s = config_.scheduler;
  RETURN_IF_ERROR(CheckElasticConfig(config_));
  ASSIGN_OR_RETURN(blas_, ChooseBlasThreads(BlasRole::kEmbedded, config_.run.blas_threads,
                                            links_.model_options, config_.learner.token_budget));
  spdlog::info("elastic core: {}", blas_.DebugString());
  // Every cell is one thread with one intra-op thread: cells are the unit of compute.
  torch::set_num_threads(1);
  ASSIGN_OR_RETURN(run_dir_, RunDirectory::Open(config_.run.runs_dir, config_.run.name,
                                                FormatJobConfig(config_), links_.resume));
  checkpoints_ = std::make_unique<CheckpointManager>(
      CheckpointOptions{run_dir_->checkpoints().string(), config_.learner.keep_last});
  ASSIGN_OR_RETURN(log_, scheduler::SchedulerLog::Open(run_dir_->path() / "scheduler.jsonl"));

  dist::MembershipOptions membership;
  membership.group.name = "elastic step group";
  membership.group.timeout =
      std::chrono::milliseconds(absl::ToInt64Milliseconds(links_.group_timeout));
  membership.group.threads = 1;
  membership_ = std::make_unique<dist::Membership>(links_.store, membership);
  queue_ = std::make_unique<MicroStepQueue>(
      MicroStepQueueOptions::FromLearnerOptions(config_.learner, /*core_cell=*/0, cores()));

  torch::manual_seed(static_cast<uint64_t>(config_.run.seed));
  for (int id = 0; id < cores(); ++id) {
    auto core = std::make_unique<Core>();
    core->id = id;
    ASSIGN_OR_RETURN(core->model, MakeInitialModel(links_.model_options));
    core->learner = std::make_unique<StreamingLearner>(
        config_.learner, config_.run.max_steps, core->model->parameters(),
        TransformerPolicy(core->model), nullptr, config_.sampling.temperature, 0, RealClock(),
        OptimizerShard{id, cores()});
    core->group = std::make_unique<StepGroup>(membership_.get(), id);
    cores_.push_back(std::move(core));
  }
  if (links_.resume) {
    ASSIGN_OR_RETURN(std::optional<std::string> latest, checkpoints_->Latest());
    if (!latest.has_value()) {
      return absl::NotFoundError(
          StrCat("--resume: no complete checkpoint in ", checkpoints_->options().directory));
    }
    RETURN_IF_ERROR(Restore(*latest));
  }
  // Every core starts from cell 0's weights (its optimiser shard is its own).
  const StreamingLearner& first = *cores_[0]->learner;
  if (cores() > 1) {
    ASSIGN_OR_RETURN(std::vector<torch::Tensor> weights, first.CopyWeights());
    for (int id = 1; id < cores(); ++id) {
      RETURN_IF_ERROR(
          cores_[id]->learner->LoadWeights(weights, first.version(), first.optimizer_step()));
    }
  }
  RETURN_IF_ERROR(Publish());

  // Before any episode finished, a fresh one is expected to fill one policy turn.
  remaining_ = std::make_unique<scheduler::RemainingTokens>(
      scheduler::RemainingTokens::kWindow, static_cast<double>(config_.actor.max_new_tokens));
  ASSIGN_OR_RETURN(scheduler::WorkUnit unit, scheduler::ParseWorkUnit(s.unit));
  meter_ =
      std::make_unique<TrainingMeter>(unit, config_.run.batch_groups * config_.actor.group_size);
  ControlPlaneOptions plane;
  plane.scheduler = s;
  plane.admission = {.max_staleness = config_.learner.max_staleness,
                     .batch_groups = config_.run.batch_groups,
                     .group_size = config_.actor.group_size};
  plane.episodes_per_cell = config_.actor.episodes_in_flight;
  plane.config_hash = JobConfigHash(config_);
  plane.model_hash = ElasticModelHash(links_.model_options);
  plane.heartbeat_interval = links_.heartbeat_interval;
  plane.heartbeat_timeout = absl::Seconds(s.heartbeat_timeout_seconds);
  plane.store_address = links_.store_address;
  plane.weights_address = links_.weights_address;
  ASSIGN_OR_RETURN(plane_,
                   ControlPlane::Create(plane, log_.get(), LocalChannel::RequeueOn(queue_.get())));
  plane_->StepEnded(0, first.optimizer_step(), first.version());
  channel_ = std::make_unique<LocalChannel>(plane_.get(), queue_.get());
  desk_ = std::make_unique<HandOverDesk>(plane_.get());
  return absl::OkStatus();
}

absl::Status ElasticCore::Restore(const std::string& checkpoint) {
  RETURN_IF_ERROR(LoadStateDict(StrCat(checkpoint, "/", kCheckpointModelFile), *cores_[0]->model));
  auto has_core = [&](int id) { return std::filesystem::exists(CoreStateDir(checkpoint, id, 2)); };
  const bool matches = cores() == 1 ? !has_core(0) : has_core(cores() - 1) && !has_core(cores());
  if (!matches) {
    return absl::FailedPreconditionError(StrCat(
        "--resume: checkpoint ", checkpoint, " holds the optimiser of ",
        has_core(0) ? "another number of core cells" : "one core cell",
        "; resume it with the scheduler.core_cells it was written with (now ", cores(), ")"));
  }
  for (int id = 0; id < cores(); ++id) {
    RETURN_IF_ERROR(
        ReadTrainerState(CoreStateDir(checkpoint, id, cores()), cores_[id]->learner->optimizer()));
  }
  return absl::OkStatus();
}

absl::Status ElasticCore::SaveCheckpoint(int64_t step) {
  // Called between two steps: every core has applied its shard of the last one (the step's
  // AgreeOk waits for all of them) and none has begun the next.
  return checkpoints_
      ->Save(step,
             [this](const std::string& dir) {
               RETURN_IF_ERROR(
                   SaveStateDict(StrCat(dir, "/", kCheckpointModelFile), *cores_[0]->model));
               for (int id = 0; id < cores(); ++id) {
                 const std::string state = CoreStateDir(dir, id, cores());
                 std::error_code error;
                 std::filesystem::create_directories(state, error);
                 if (error) {
                   return absl::InternalError(
                       StrCat("checkpoint: creating ", state, ": ", error.message()));
                 }
                 RETURN_IF_ERROR(WriteTrainerState(state, cores_[id]->learner->optimizer()));
               }
               return absl::OkStatus();
             })
      .status();
}

absl::StatusOr<std::shared_ptr<const WeightSnapshot>> ElasticCore::Snapshot() const {
  return MakeSnapshot(cores_[0]->model, cores_[0]->learner->version());
}

absl::Status ElasticCore::Publish() {
  ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> snapshot, Snapshot());
  return links_.publish(std::move(snapshot));
}

absl::Status ElasticCore::Feed() {
  const int64_t batch_groups = config_.run.batch_groups;
  int64_t queue_step = 0;
  while (!Stopping()) {
    const absl::Status begun = queue_->AwaitStep(queue_step, absl::Now() + kCorePoll);
    if (absl::IsDeadlineExceeded(begun)) continue;
    if (absl::IsCancelled(begun)) return absl::OkStatus();
    RETURN_IF_ERROR(begun);
    StepData data;
    for (int64_t groups = 0; groups < batch_groups;) {
      if (Stopping()) return absl::OkStatus();
      absl::StatusOr<std::vector<std::vector<Trajectory>>> items =
          links_.sample(static_cast<int>(batch_groups - groups), kCorePoll);
      if (absl::IsCancelled(items.status()) || absl::IsFailedPrecondition(items.status())) {
        return absl::OkStatus();  // the buffer closed: the job is stopping
      }
      RETURN_IF_ERROR(items.status());
      for (std::vector<Trajectory>& group : *items) {
        int64_t tokens = 0;
        for (const Trajectory& t : group) {
          remaining_->Observe(t.NumTrainable());
          data.Add(t, config_.run.success_reward);
          tokens += t.NumTrainable();
        }
        meter_->Sampled(static_cast<int64_t>(group.size()), tokens);
        // One Add per group: advantages are computed over whole groups.
        RETURN_IF_ERROR(queue_->Add(std::move(group)));
        ++groups;
      }
    }
    {
      absl::MutexLock lock(&mu_);
      step_data_[queue_step] = data;
    }
    RETURN_IF_ERROR(queue_->Close());
    ++queue_step;
  }
  return absl::OkStatus();
}

absl::Status ElasticCore::Control() {
  const absl::Duration tick = absl::Seconds(config_.scheduler.tick_seconds);
  int64_t seen = 0;
  absl::Time next = absl::Now();
  while (!Stopping()) {
    // At the tick, or sooner when a cell reports a switch, a step begins or ends, or a cell
    // leaving rollout parks its episodes.
    seen = plane_->AwaitEvent(seen, next);
    if (Stopping()) break;
    const absl::Time now = absl::Now();
    next = now + tick;
    TickInputs inputs;
    inputs.training = meter_->Report(links_.waiting_groups() * config_.actor.group_size,
                                     RunningStepOf(queue_->report()));
    inputs.episode_tokens = remaining_->Fresh();
    desk_->Describe(inputs);
    ASSIGN_OR_RETURN(std::vector<int> placements, plane_->Tick(now, inputs));
    desk_->Deliver(placements);
  }
  return absl::OkStatus();
}

absl::StatusOr<StreamingStepResult> ElasticCore::RunStep(Core& core, int64_t queue_step) {
  while (!Stopping()) {  // on a stop, the reduce decides whether this step still needs the core
    absl::StatusOr<std::shared_ptr<const MicroStep>> claimed =
        queue_->Claim(core.id, absl::Now() + kCorePoll);
    if (absl::IsDeadlineExceeded(claimed.status())) continue;
    if (absl::IsCancelled(claimed.status())) break;
    RETURN_IF_ERROR(claimed.status());
    if (*claimed == nullptr) break;  // the step is complete
    RETURN_IF_ERROR(core.learner->RunMicroStep(**claimed));
    RETURN_IF_ERROR(queue_->Done(core.id, (*claimed)->id));
  }
  return ReduceStep(
      *queue_, *core.group, *core.learner, queue_step, [this] { return Stopping(); }, kCorePoll);
}

absl::Status ElasticCore::RunCore(Core& core) {
  torch::set_num_threads(1);
  for (int64_t queue_step = 0; !Stopping(); ++queue_step) {
    absl::Status begun;
    do {
      begun = queue_->AwaitStep(queue_step, absl::Now() + kCorePoll);
    } while (absl::IsDeadlineExceeded(begun) && !Stopping());
    if (absl::IsCancelled(begun) || Stopping()) return absl::OkStatus();
    RETURN_IF_ERROR(begun);
    RETURN_IF_ERROR(queue_->Join(core.id, queue_step));
    absl::StatusOr<StreamingStepResult> r = RunStep(core, queue_step);
    if (!r.ok() && !absl::IsUnavailable(r.status())) return r.status();
  }
  return absl::OkStatus();
}

void ElasticCore::Shutdown() {
  stopping_.store(true);
  if (queue_ != nullptr) queue_->Cancel();
  if (plane_ != nullptr) plane_->Stop();
  if (controller_.joinable()) controller_.join();
  for (const auto& core : cores_) {
    if (core->thread.joinable()) core->thread.join();
  }
  if (feeder_.joinable()) feeder_.join();
}

absl::StatusOr<CoreResult> ElasticCore::Train(const RunStop& stop) {
  const RunOptions& run = config_.run;
  std::optional<ProgressReporter> progress;
  if (links_.progress != nullptr) {
    progress.emplace(links_.progress, links_.progress_is_terminal, absl::Seconds(10));
  }
  start_ = absl::Now();
  plane_->SetStart(start_);
  stop_ = &stop;
  for (size_t i = 1; i < cores_.size(); ++i) {
    Core* core = cores_[i].get();
    core->thread = std::thread([this, core] {
      const absl::Status s = RunCore(*core);
      if (!s.ok() && !Stopping()) Fail(Annotate(s, StrCat("elastic core cell ", core->id)));
    });
  }
  feeder_ = std::thread([this] {
    const absl::Status s = Feed();
    if (!s.ok() && !Stopping()) Fail(Annotate(s, "elastic core, feeding the learner"));
  });
  controller_ = std::thread([this] {
    const absl::Status s = Control();
    if (!s.ok() && !Stopping()) Fail(Annotate(s, "elastic scheduler"));
  });

  Core& core = *cores_[0];
  CoreResult result;
  double busy = 0;
  int64_t consumed = 0, steps_done = 0;
  int64_t step = core.learner->optimizer_step();
  absl::Status failure;
  for (int64_t queue_step = 0; step < run.max_steps && !stop.Reached(); ++queue_step) {
    const absl::Time step_start = absl::Now();
    failure =
        channel_->BeginStep(queue_step, core.learner->version(), core.learner->optimizer_step());
    if (failure.ok()) failure = queue_->Join(core.id, queue_step);
    absl::StatusOr<StreamingStepResult> trained;
    if (failure.ok()) {
      trained = RunStep(core, queue_step);
      // Unavailable: nothing in the step was trainable (all too stale).
      if (!trained.ok() && !absl::IsUnavailable(trained.status())) failure = trained.status();
    }
    if (const absl::Status first = FirstError(); !first.ok()) failure = first;
    if (!failure.ok()) break;
    StepData data;
    {
      absl::MutexLock lock(&mu_);
      data = step_data_[queue_step];
      step_data_.erase(queue_step);
    }
    if (!trained.ok()) {
      plane_->StepEnded(++steps_done, core.learner->optimizer_step(), core.learner->version());
      continue;
    }
    const StreamingStepResult& r = *trained;
    const StepReport report = queue_->report();
    meter_->StepDone(MeteredStepOf(r, report));
    step = r.optimizer.step;
    // Every step: a cell joining the next one loads exactly these weights, and rolling-out
    // cells take them before admission opens the next batch.
    failure = Publish();
    if (!failure.ok()) break;
    plane_->StepEnded(++steps_done, step, core.learner->version());
    if (config_.learner.checkpoint_every > 0 && step % config_.learner.checkpoint_every == 0) {
      failure = SaveCheckpoint(step);
      if (!failure.ok()) break;
    }
    busy += r.times.compute();
    consumed += data.trajectories;
    const double elapsed = absl::ToDoubleSeconds(absl::Now() - start_);
    nlohmann::json line =
        ElasticStepLine(r, core.learner->version(), elapsed,
                        absl::ToDoubleSeconds(absl::Now() - step_start), data, report);
    const ControlSummary control = plane_->Summary();
    line["requeued_micro_steps"] = report.requeued;
    line["satellites_training"] = control.satellites_training;
    line["episodes_in_flight"] = control.episodes_in_flight;
    failure = run_dir_->AppendMetrics(line);
    if (!failure.ok()) break;
    ++result.steps;
    result.last_reward = data.reward();
    result.last_success = data.success();
    result.best_success = std::max(result.best_success, result.last_success);
    if (progress.has_value()) {
      progress->Update(ProgressSnapshot{.step = step,
                                        .max_steps = run.max_steps,
                                        .reward = result.last_reward,
                                        .success = result.last_success,
                                        .learner_utilization = busy / std::max(1e-9, elapsed),
                                        .elapsed_seconds = elapsed,
                                        .max_wall_seconds = run.max_wall_seconds});
    }
  }
  if (progress.has_value()) progress->Finish();
  // The cells see "finished" in their heartbeats and leave; nothing moves any more.
  plane_->SetFinished();
  stopping_.store(true);
  if (controller_.joinable()) controller_.join();
  stop_ = nullptr;
  if (const absl::Status first = FirstError(); !first.ok()) return first;
  // A stop request or the wall budget cancels the step in progress: not a failure.
  if (!failure.ok() && !(absl::IsCancelled(failure) && stop.Reached())) return failure;
  result.final_step = step;
  const std::string stopped_by(step >= run.max_steps ? "max_steps" : stop.Reason());
  result.summary =
      Summary(result, absl::ToDoubleSeconds(absl::Now() - start_), busy, consumed, stopped_by);
  return result;
}

nlohmann::json ElasticCore::Summary(const CoreResult& result, double wall, double busy,
                                    int64_t consumed, const std::string& stopped_by) const {
  const ControlSummary control = plane_->Summary();
  return {
      {"mode", "elastic"},
      {"steps", result.steps},
      {"final_step", result.final_step},
      {"version", cores_[0]->learner->version()},
      {"wall_seconds", wall},
      {"last_reward_mean", result.last_reward},
      {"last_success_rate", result.last_success},
      {"best_success_rate", result.best_success},
      {"trajectories_trained", consumed},
      {"learner_utilization", busy / std::max(1e-9, wall)},
      {"stopped_by", stopped_by},
      {"blas", blas_.ToJson()},
      {"elastic",
       {{"cells", config_.scheduler.cells},
        {"core_cells", cores()},
        {"satellites", config_.scheduler.cells - config_.scheduler.core_cells},
        {"cells_registered", control.cells_registered},
        {"cells_lost", control.cells_lost},
        {"controller", config_.scheduler.controller},
        {"switches", control.switches.size()},
        {"to_train", SwitchStats(control.switches, true)},
        {"to_rollout", SwitchStats(control.switches, false)},
        {"hand_over",
         {{"episodes_handed", control.episodes_handed},
          {"episodes_placed", control.episodes_placed},
          {"max_taker_held", control.max_taker_held},
          {"slots", config_.actor.episodes_in_flight}}}}},
  };
}

// ---- `flywheel learner --scheduler-listen` -----------------------------------------------------

absl::StatusOr<RemoteLearnerResult> RunElasticCore(const JobConfig& config,
                                                   const ElasticCoreOptions& options) {
  const SchedulerOptions& s = config.scheduler;
  if (s.core_cells != 1) {
    return absl::UnimplementedError(
        StrCat("scheduler.core_cells = ", s.core_cells,
               ": with cells in other processes the core is one cell (the learner process); "
               "several core cells run inside `flywheel train`"));
  }
  RETURN_IF_ERROR(CheckElasticConfig(config));
  SetEmulatedSlowdown(config.run.emulated_slowdown);
  ASSIGN_OR_RETURN(std::unique_ptr<EnvFactory> factory, EnvFactory::Create(config.env));
  // The cells' tokenizer: the model's vocabulary must cover it.
  ASSIGN_OR_RETURN(const PolicyText text, MakePolicyText(config, *factory));
  CoreLinks links;
  ASSIGN_OR_RETURN(links.model_options,
                   ResolveModelOptions(config, *text.tokenizer, text.tokenizer_name));
  // Reach the buffer before creating anything on disk: a wrong address leaves no run behind.
  ASSIGN_OR_RETURN(std::unique_ptr<RemoteBuffer> buffer,
                   RemoteBuffer::ConnectAsLearner(options.buffer_address, options.security,
                                                  options.connect_timeout, options.stop,
                                                  config.actor.group_size));
  std::string host;
  int port = 0;
  RETURN_IF_ERROR(ParseHostPort(options.scheduler_listen, &host, &port, "--scheduler-listen"));
  dist::RendezvousOptions rendezvous;
  rendezvous.host = host;
  rendezvous.port = 0;  // a world of one: the cells connect to it later, by its address
  rendezvous.timeout =
      std::chrono::milliseconds(absl::ToInt64Milliseconds(options.connect_timeout));
  ASSIGN_OR_RETURN(std::unique_ptr<dist::Rendezvous> store, dist::Rendezvous::Join(rendezvous));
  WeightsServerOptions weights_options;
  weights_options.address = options.weights_listen;
  weights_options.security = options.security;
  ASSIGN_OR_RETURN(std::unique_ptr<WeightsServer> weights, WeightsServer::Start(weights_options));

  links.sample = [&](int max_groups, absl::Duration wait) {
    // A restarting or unreachable buffer is waited for connect_timeout.
    return buffer->SampleGroupsOrWait(max_groups, wait, options.connect_timeout);
  };
  int64_t waiting = 0;  // as last asked; the control loop's only caller
  links.waiting_groups = [&] {
    if (absl::StatusOr<v1::ServerInfoResponse> info = buffer->Info(kCorePoll); info.ok()) {
      waiting = info->size();
    }
    return waiting;
  };
  links.publish = [&](std::shared_ptr<const WeightSnapshot> snapshot) {
    return weights->Publish(*snapshot);
  };
  links.store = store->store();
  links.store_address = StrCat(host, ":", store->port());
  links.weights_address = weights->address();
  links.heartbeat_interval = absl::Seconds(s.heartbeat_seconds);
  links.group_timeout = options.connect_timeout;
  links.resume = options.resume;
  links.progress = options.progress;
  links.progress_is_terminal = options.progress_is_terminal;
  ASSIGN_OR_RETURN(std::unique_ptr<ElasticCore> core, ElasticCore::Create(config, links));
  SchedulerServerOptions server_options;
  server_options.address = options.scheduler_listen;
  server_options.security = options.security;
  ASSIGN_OR_RETURN(std::unique_ptr<SchedulerServer> scheduler,
                   SchedulerServer::Start(&core->channel(), server_options));
  spdlog::info("elastic core: `flywheel cell` processes register at {}", scheduler->address());
  if (options.on_serving) options.on_serving(weights->address(), scheduler->address());

  const RunStop stop(config.run.max_wall_seconds, options.stop, absl::Now());
  absl::StatusOr<CoreResult> trained = core->Train(stop);
  // The cells see "finished" in their heartbeats and leave while the services still answer.
  weights->SetFinished();
  core->plane().AwaitAllGone(absl::Now() + options.finished_linger).IgnoreError();
  core->Shutdown();
  scheduler->Shutdown();
  weights->Shutdown();
  RETURN_IF_ERROR(trained.status());

  RemoteLearnerResult result;
  result.steps = trained->steps;
  result.final_step = trained->final_step;
  result.last_reward = trained->last_reward;
  result.last_success = trained->last_success;
  result.stopped = options.stop != nullptr && options.stop->load();
  result.summary = trained->summary;
  int64_t finished = 0;
  for (const CellInfo& c : core->plane().cells()) finished += c.finished;
  result.summary["processes"] = true;
  result.summary["episodes_finished_reported"] = finished;
  RETURN_IF_ERROR(core->run_dir().WriteSummary(result.summary));
  return result;
}

}  // namespace flywheel
