#include "flywheel/elastic/elastic_core.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "flywheel/core/emulated_device.h"
#include "flywheel/core/host_port.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/dist/membership.h"
#include "flywheel/dist/rendezvous.h"
#include "flywheel/elastic/training_meter.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/learner/checkpoint.h"
#include "flywheel/learner/streaming_learner.h"
#include "flywheel/learner/trainer_state.h"
#include "flywheel/model/safetensors.h"
#include "flywheel/model/transformer.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/runtime/blas_choice.h"
#include "flywheel/elastic/elastic_cell.h"
#include "flywheel/elastic/elastic_step_line.h"
#include "flywheel/elastic/elastic_switches.h"
#include "flywheel/runtime/learner_group.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/policy_text.h"
#include "flywheel/runtime/progress.h"
#include "flywheel/runtime/remote_buffer.h"
#include "flywheel/runtime/run_directory.h"
#include "flywheel/runtime/run_stop.h"
#include "flywheel/runtime/transformer_policy.h"
#include "flywheel/scheduler/elastic_control.h"
#include "flywheel/scheduler/micro_step_queue.h"
#include "flywheel/scheduler/remaining_tokens.h"
#include "flywheel/scheduler/role_controller.h"
#include "flywheel/scheduler/scheduler_log.h"
#include "flywheel/elastic/scheduler_service.h"
#include "flywheel/scheduler/step_group.h"
#include "flywheel/weights/service.h"

namespace flywheel {
namespace {

using scheduler::CellRole;
using scheduler::SchedulerDecision;

// How long one blocking call waits before its loop rechecks whether to stop.
constexpr absl::Duration kCellPoll = absl::Milliseconds(100);
constexpr int kCoreCell = 0;

v1::CellRole WireRole(CellRole role) {
  return role == CellRole::kTrain ? v1::CELL_ROLE_TRAIN : v1::CELL_ROLE_ROLLOUT;
}

// A role change asked of a cell and not yet reported done by its heartbeats.
struct PendingSwitch {
  int cell = -1;
  int satellite = 0;
  bool to_train = false;
  absl::Time asked;
};

class ElasticCore {
 public:
  ElasticCore(const JobConfig& config, const ElasticCoreOptions& options)
      : config_(config), options_(options) {}
  ~ElasticCore() { Shutdown(); }

  absl::Status Init();
  absl::StatusOr<RemoteLearnerResult> Train();

 private:
  bool Stopping() const { return stopping_.load() || (stop_ != nullptr && stop_->Reached()); }
  void Fail(absl::Status status);
  absl::Status FirstError() const;
  absl::Status Restore(const std::string& checkpoint);
  absl::Status SaveCheckpoint(int64_t step);
  absl::Status Publish();
  absl::Status Feed();
  absl::Status Control();
  // One controller tick: slots, the rule, switches, grants.
  absl::Status Tick();
  absl::StatusOr<StreamingStepResult> RunStep(int64_t queue_step);
  void Shutdown();

  const JobConfig config_;
  const ElasticCoreOptions options_;
  absl::Time start_;
  const RunStop* stop_ = nullptr;
  std::unique_ptr<EnvFactory> factory_;
  ModelOptions model_options_;
  BlasChoice blas_;
  std::unique_ptr<RemoteBuffer> buffer_;
  std::unique_ptr<RunDirectory> run_dir_;
  std::unique_ptr<CheckpointManager> checkpoints_;
  std::unique_ptr<scheduler::SchedulerLog> log_;
  Transformer model_{nullptr};
  std::unique_ptr<StreamingLearner> learner_;
  std::unique_ptr<dist::Rendezvous> store_;  // the TCPStore the step groups form over
  std::unique_ptr<dist::Membership> membership_;
  std::unique_ptr<StepGroup> group_;
  std::unique_ptr<MicroStepQueue> queue_;
  std::unique_ptr<WeightsServer> weights_;
  std::unique_ptr<SchedulerServer> scheduler_;
  scheduler::ElasticAdmission admission_;
  std::unique_ptr<scheduler::RoleController> roles_;  // the controller thread's
  std::unique_ptr<TrainingMeter> meter_;  // the backlog and the training rate
  // A fresh episode's expected tokens, from the trajectories the feeder takes (token unit).
  std::unique_ptr<scheduler::RemainingTokens> remaining_;
  std::thread feeder_;
  std::thread controller_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> steps_done_{0};  // steps ended and published: what admission counts
  // The optimiser's step, as the scheduler's thread reads it (the optimiser is the training
  // thread's).
  std::atomic<int64_t> optimizer_step_{0};
  std::atomic<int64_t> published_{-1};  // the version the weights service holds

  // The controller thread's own state.
  std::vector<int> slot_cell_;  // satellite slot → cell id, -1 when free
  std::vector<PendingSwitch> pending_;
  int64_t buffer_groups_ = 0;  // complete groups in the buffer, as last asked

  mutable absl::Mutex mu_;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  std::vector<SwitchRecord> switches_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, StepData> step_data_ ABSL_GUARDED_BY(mu_);  // by queue step
  int64_t cells_lost_ ABSL_GUARDED_BY(mu_) = 0;                 // declared dead (not left)
  int64_t episodes_in_flight_ ABSL_GUARDED_BY(mu_) = 0;         // of the live cells, last tick
  int training_satellites_ ABSL_GUARDED_BY(mu_) = 0;
};

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
  if (s.core_cells != 1) {
    return absl::UnimplementedError(
        StrCat("scheduler.core_cells = ", s.core_cells,
               ": with cells in other processes the core is one cell (the learner process); "
               "several core cells run inside `flywheel train`"));
  }
  admission_ = {.max_staleness = config_.learner.max_staleness,
                .batch_groups = config_.run.batch_groups,
                .group_size = config_.actor.group_size};
  if (config_.learner.max_staleness < 0) {
    return absl::InvalidArgumentError(
        "run.mode = \"elastic\" admits the episodes of batches up to learner.max_staleness "
        "versions ahead of the learner; set learner.max_staleness >= 0 (0 = on-policy)");
  }
  RETURN_IF_ERROR(admission_.Validate());
  ASSIGN_OR_RETURN(factory_, EnvFactory::Create(config_.env));
  // The cells' tokenizer: the model's vocabulary must cover it.
  ASSIGN_OR_RETURN(const PolicyText text, MakePolicyText(config_, *factory_));
  ASSIGN_OR_RETURN(model_options_,
                   ResolveModelOptions(config_, *text.tokenizer, text.tokenizer_name));

  // Reach the buffer before creating anything on disk: a wrong address leaves no run behind.
  ASSIGN_OR_RETURN(buffer_, RemoteBuffer::ConnectAsLearner(
                                options_.buffer_address, options_.security,
                                options_.connect_timeout, options_.stop, config_.actor.group_size));

  ASSIGN_OR_RETURN(blas_, ChooseBlasThreads(BlasRole::kEmbedded, config_.run.blas_threads,
                                            model_options_, config_.learner.token_budget));
  spdlog::info("elastic core: {}", blas_.DebugString());
  // The core is one cell, as each satellite: one intra-op thread.
  torch::set_num_threads(1);
  ASSIGN_OR_RETURN(run_dir_, RunDirectory::Open(config_.run.runs_dir, config_.run.name,
                                                FormatJobConfig(config_), options_.resume));
  checkpoints_ = std::make_unique<CheckpointManager>(
      CheckpointOptions{run_dir_->checkpoints().string(), config_.learner.keep_last});
  ASSIGN_OR_RETURN(log_, scheduler::SchedulerLog::Open(run_dir_->path() / "scheduler.jsonl"));

  torch::manual_seed(static_cast<uint64_t>(config_.run.seed));
  ASSIGN_OR_RETURN(model_, MakeInitialModel(model_options_));
  learner_ = std::make_unique<StreamingLearner>(
      config_.learner, config_.run.max_steps, model_->parameters(), TransformerPolicy(model_),
      nullptr, config_.sampling.temperature, 0, RealClock(), OptimizerShard{kCoreCell, 1});
  if (options_.resume) {
    ASSIGN_OR_RETURN(std::optional<std::string> latest, checkpoints_->Latest());
    if (!latest.has_value()) {
      return absl::NotFoundError(
          StrCat("--resume: no complete checkpoint in ", checkpoints_->options().directory));
    }
    RETURN_IF_ERROR(Restore(*latest));
  }

  std::string host;
  int port = 0;
  RETURN_IF_ERROR(ParseHostPort(options_.scheduler_listen, &host, &port, "--scheduler-listen"));
  dist::RendezvousOptions rendezvous;
  rendezvous.host = host;
  rendezvous.port = 0;  // a world of one: the cells connect to it later, by its address
  rendezvous.timeout =
      std::chrono::milliseconds(absl::ToInt64Milliseconds(options_.connect_timeout));
  ASSIGN_OR_RETURN(store_, dist::Rendezvous::Join(rendezvous));
  dist::MembershipOptions membership;
  membership.group.name = "elastic step group";
  membership.group.timeout = rendezvous.timeout;
  membership.group.threads = 1;
  membership_ = std::make_unique<dist::Membership>(store_->store(), membership);
  group_ = std::make_unique<StepGroup>(membership_.get(), kCoreCell);
  queue_ = std::make_unique<MicroStepQueue>(
      MicroStepQueueOptions::FromLearnerOptions(config_.learner, kCoreCell, 1));

  WeightsServerOptions weights_options;
  weights_options.address = options_.weights_listen;
  weights_options.security = options_.security;
  ASSIGN_OR_RETURN(weights_, WeightsServer::Start(weights_options));
  RETURN_IF_ERROR(Publish());

  SchedulerServerOptions scheduler_options;
  scheduler_options.address = options_.scheduler_listen;
  scheduler_options.security = options_.security;
  SchedulerServiceOptions& service = scheduler_options.service;
  service.config_hash = JobConfigHash(config_);
  service.model_hash = ElasticModelHash(model_options_);
  service.heartbeat_interval = absl::Seconds(s.heartbeat_seconds);
  service.heartbeat_timeout = absl::Seconds(s.heartbeat_timeout_seconds);
  service.core_cell = kCoreCell;
  service.store_address = StrCat(host, ":", store_->port());
  service.weights_address = weights_->address();
  ASSIGN_OR_RETURN(scheduler_, SchedulerServer::Start(queue_.get(), scheduler_options));

  const int satellites = static_cast<int>(s.cells - s.core_cells);
  remaining_ = std::make_unique<scheduler::RemainingTokens>(
      scheduler::RemainingTokens::kWindow, static_cast<double>(config_.actor.max_new_tokens));
  ASSIGN_OR_RETURN(roles_, scheduler::MakeElasticController(
                                    s, satellites,
                                    static_cast<double>(config_.actor.episodes_in_flight),
                                    remaining_->Fresh()));
  ASSIGN_OR_RETURN(scheduler::WorkUnit unit, scheduler::ParseWorkUnit(s.unit));
  meter_ = std::make_unique<TrainingMeter>(unit);
  slot_cell_.assign(satellites, -1);
  spdlog::info("elastic core: {} satellite slots for `flywheel cell` processes; {}", satellites,
               roles_->DebugString());
  if (options_.on_serving) options_.on_serving(weights_->address(), scheduler_->address());
  return absl::OkStatus();
}

absl::Status ElasticCore::Restore(const std::string& checkpoint) {
  RETURN_IF_ERROR(LoadStateDict(StrCat(checkpoint, "/", kCheckpointModelFile), *model_));
  return ReadTrainerState(checkpoint, learner_->optimizer());
}

absl::Status ElasticCore::SaveCheckpoint(int64_t step) {
  return checkpoints_
      ->Save(step,
             [this](const std::string& dir) {
               RETURN_IF_ERROR(SaveStateDict(StrCat(dir, "/", kCheckpointModelFile), *model_));
               return WriteTrainerState(dir, learner_->optimizer());
             })
      .status();
}

absl::Status ElasticCore::Publish() {
  ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> snapshot,
                   MakeSnapshot(model_, learner_->version()));
  RETURN_IF_ERROR(weights_->Publish(*snapshot));
  published_ = learner_->version();
  return absl::OkStatus();
}

absl::Status ElasticCore::Feed() {
  const int64_t batch_groups = config_.run.batch_groups;
  int64_t queue_step = 0;
  while (!Stopping()) {
    const absl::Status begun = queue_->AwaitStep(queue_step, absl::Now() + kCellPoll);
    if (absl::IsDeadlineExceeded(begun)) continue;
    if (absl::IsCancelled(begun)) return absl::OkStatus();
    RETURN_IF_ERROR(begun);
    StepData data;
    for (int64_t groups = 0; groups < batch_groups;) {
      if (Stopping()) return absl::OkStatus();
      // A restarting or unreachable buffer is waited for connect_timeout.
      ASSIGN_OR_RETURN(std::vector<std::vector<Trajectory>> items,
                       buffer_->SampleGroupsOrWait(static_cast<int>(batch_groups - groups),
                                                   kCellPoll, options_.connect_timeout));
      for (std::vector<Trajectory>& group : items) {
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

absl::Status ElasticCore::Tick() {
  SchedulerService& service = scheduler_->service();
  const absl::Time now = absl::Now();
  std::vector<CellInfo> cells = service.cells();
  std::map<int, const CellInfo*> by_id;
  for (const CellInfo& c : cells) by_id[c.cell] = &c;
  // Free the slots of dead cells; give free slots to cells not yet placed, lowest id first.
  std::vector<bool> placed(cells.size(), false);
  for (int& cell : slot_cell_) {
    if (cell < 0) continue;
    const CellInfo* info = by_id.at(cell);
    if (!info->dead) continue;
    spdlog::warn("elastic core: cell {} ({}) {}; its satellite slot is free", cell, info->name,
                 info->left ? "left" : "was declared dead");
    log_->Append({{"event", info->left ? "cell_left" : "cell_lost"},
                  {"cell", cell},
                  {"requeued_micro_steps", info->requeued},
                  {"at_s", absl::ToDoubleSeconds(now - start_)}})
        .IgnoreError();
    if (!info->left) {
      absl::MutexLock lock(&mu_);
      ++cells_lost_;
    }
    std::erase_if(pending_, [&](const PendingSwitch& p) { return p.cell == cell; });
    cell = -1;
  }
  for (size_t i = 0; i < cells.size(); ++i) {
    placed[i] = std::find(slot_cell_.begin(), slot_cell_.end(), cells[i].cell) != slot_cell_.end();
  }
  for (size_t i = 0; i < cells.size(); ++i) {
    if (placed[i] || cells[i].dead || cells[i].role != v1::CELL_ROLE_ROLLOUT ||
        cells[i].reported_role == v1::CELL_ROLE_UNSPECIFIED) {
      continue;  // a cell is placed once, after its first heartbeat (it is running)
    }
    auto free = std::find(slot_cell_.begin(), slot_cell_.end(), -1);
    if (free == slot_cell_.end()) break;
    *free = cells[i].cell;
    const int slot = static_cast<int>(free - slot_cell_.begin());
    // The cell starts rolling out; the rule may have this slot training.
    if (roles_->role(slot) == CellRole::kTrain) {
      RETURN_IF_ERROR(service.SetRole(cells[i].cell, v1::CELL_ROLE_TRAIN));
      pending_.push_back({cells[i].cell, slot, true, now});
    }
    log_->Append({{"event", "cell_placed"},
                  {"cell", cells[i].cell},
                  {"name", cells[i].name},
                  {"satellite", slot},
                  {"at_s", absl::ToDoubleSeconds(now - start_)}})
        .IgnoreError();
  }

  // Admission over every cell ever registered: the dead ones count with what they finished
  // (elastic_control.h). An episode granted to a cell is handed out (queued there, or running),
  // as a task handed to an actor thread of `flywheel train`.
  std::vector<scheduler::CellAdmission> admissions;
  int64_t in_flight = 0, unplaced = 0;
  for (const CellInfo& c : cells) {
    scheduler::CellAdmission a;
    a.alive = !c.dead;
    a.rolling_out = c.role == v1::CELL_ROLE_ROLLOUT && c.reported_role == v1::CELL_ROLE_ROLLOUT;
    a.dispatched = c.dispatched;
    a.finished = c.finished;
    a.admit_until = c.admit_until;
    admissions.push_back(a);
    if (!a.alive) continue;
    in_flight += c.dispatched - c.finished;
    const bool placed = std::find(slot_cell_.begin(), slot_cell_.end(), c.cell) != slot_cell_.end();
    if (!placed) unplaced += c.dispatched - c.finished;  // rolls out outside the rule
  }
  // The controller sees the satellite slots; a free slot is a satellite that holds nothing.
  std::vector<scheduler::SatelliteReport> reports;
  for (const int cell : slot_cell_) {
    scheduler::SatelliteReport r;
    r.alive = cell >= 0;
    if (r.alive) {
      const CellInfo& c = *by_id.at(cell);
      r.rolling_out =
          c.role == v1::CELL_ROLE_ROLLOUT && c.reported_role == v1::CELL_ROLE_ROLLOUT;
      r.dispatched = c.dispatched;
      r.finished = c.finished;
      r.held = c.dispatched - c.finished;
      r.slots = config_.actor.episodes_in_flight;
      r.remaining_tokens = c.remaining_tokens;
    }
    reports.push_back(r);
  }
  const int64_t steps_done = steps_done_.load();
  const int64_t room = admission_.Room(steps_done, scheduler::AdmittedEpisodes(admissions));
  const StepReport running = queue_->report();
  int64_t done = 0;
  for (const auto& [id, ran] : running.ran_by) done += static_cast<int64_t>(ran.size());
  // The buffer's complete groups: what the feeder can give a trainer now.
  if (absl::StatusOr<v1::ServerInfoResponse> info = buffer_->Info(kCellPoll); info.ok()) {
    buffer_groups_ = info->size();
  }
  const scheduler::TrainingReport training_side =
      meter_->Report(buffer_groups_ * config_.actor.group_size, {.episodes = running.complete ? 0 : running.kept,
                                .tokens = running.complete ? 0 : running.trainable_tokens,
                                .micro_steps = running.micro_steps,
                                .done = done});
  scheduler::SchedulerObservation observation = scheduler::ObserveCells(
      now, optimizer_step_.load(), room, reports, training_side, unplaced);
  if (roles_->unit() == scheduler::WorkUnit::kTokens) {
    // Each cell estimates its own episodes' remaining tokens (its heartbeat); a full cell's
    // capacity comes from every trajectory the core has trained on.
    observation.capacity_per_cell =
        static_cast<double>(config_.actor.episodes_in_flight) * remaining_->Fresh();
  }
  ASSIGN_OR_RETURN(SchedulerDecision decision, roles_->Decide(observation));
  if (decision.changed) RETURN_IF_ERROR(log_->Append(decision));
  if (decision.move != SchedulerDecision::Move::kNone) {
    const int cell = slot_cell_[decision.satellite];
    if (cell >= 0) {
      const bool to_train = decision.move == SchedulerDecision::Move::kToTrain;
      RETURN_IF_ERROR(service.SetRole(cell, WireRole(roles_->role(decision.satellite))));
      // A move that reverses one the cell has not completed cancels it: the cell stays in the
      // role it reports, and no switch is timed.
      if (std::erase_if(pending_, [&](const PendingSwitch& p) { return p.cell == cell; }) == 0) {
        pending_.push_back({cell, decision.satellite, to_train, now});
      }
      // The role changed: recompute this cell's grant below with it.
      for (size_t i = 0; i < cells.size(); ++i) {
        if (cells[i].cell == cell) admissions[i].rolling_out = false;
      }
    }
  }
  // Switches end when the cell's heartbeat reports the new role.
  std::erase_if(pending_, [&](const PendingSwitch& p) {
    const CellInfo* info = by_id.at(p.cell);
    const v1::CellRole wanted = p.to_train ? v1::CELL_ROLE_TRAIN : v1::CELL_ROLE_ROLLOUT;
    if (info->reported_role != wanted) return false;
    SwitchRecord record;
    record.satellite = p.satellite;
    record.to_train = p.to_train;
    record.seconds = absl::ToDoubleSeconds(now - p.asked);
    record.at = absl::ToDoubleSeconds(now - start_);
    log_->Append(record.ToJson()).IgnoreError();
    RecordSwitchMetrics(record);
    absl::MutexLock lock(&mu_);
    switches_.push_back(record);
    return true;
  });

  const std::vector<int64_t> grants = scheduler::GrantAdmission(admission_, steps_done, admissions,
                                                                config_.actor.episodes_in_flight);
  int training = 0;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (cells[i].dead) continue;
    training += cells[i].reported_role == v1::CELL_ROLE_TRAIN;
    if (grants[i] != cells[i].admit_until) {
      RETURN_IF_ERROR(service.SetAdmission(cells[i].cell, grants[i], published_.load()));
    }
  }
  absl::MutexLock lock(&mu_);
  episodes_in_flight_ = in_flight;
  training_satellites_ = training;
  return absl::OkStatus();
}

absl::Status ElasticCore::Control() {
  const absl::Duration tick = absl::Seconds(config_.scheduler.tick_seconds);
  while (!Stopping()) {
    absl::SleepFor(tick);
    RETURN_IF_ERROR(Tick());
  }
  return absl::OkStatus();
}

absl::StatusOr<StreamingStepResult> ElasticCore::RunStep(int64_t queue_step) {
  while (true) {
    if (Stopping()) break;  // the reduce decides whether this step still needs the core
    absl::StatusOr<std::shared_ptr<const MicroStep>> claimed =
        queue_->Claim(kCoreCell, absl::Now() + kCellPoll);
    if (absl::IsDeadlineExceeded(claimed.status())) continue;
    if (absl::IsCancelled(claimed.status())) break;
    RETURN_IF_ERROR(claimed.status());
    if (*claimed == nullptr) break;  // the step is complete
    RETURN_IF_ERROR(learner_->RunMicroStep(**claimed));
    RETURN_IF_ERROR(queue_->Done(kCoreCell, (*claimed)->id));
  }
  return ReduceStep(
      *queue_, *group_, *learner_, queue_step, [this] { return Stopping(); }, kCellPoll);
}

void ElasticCore::Shutdown() {
  stopping_.store(true);
  if (queue_ != nullptr) queue_->Cancel();
  if (controller_.joinable()) controller_.join();
  if (feeder_.joinable()) feeder_.join();
  if (scheduler_ != nullptr) scheduler_->Shutdown();
  if (weights_ != nullptr) weights_->Shutdown();
}

absl::StatusOr<RemoteLearnerResult> ElasticCore::Train() {
  const RunOptions& run = config_.run;
  std::optional<ProgressReporter> progress;
  if (options_.progress != nullptr) {
    progress.emplace(options_.progress, options_.progress_is_terminal, absl::Seconds(10));
  }
  start_ = absl::Now();
  const RunStop stop(run.max_wall_seconds, options_.stop, start_);
  stop_ = &stop;
  optimizer_step_ = learner_->optimizer_step();  // before the threads start
  feeder_ = std::thread([this] {
    const absl::Status s = Feed();
    if (!s.ok() && !Stopping()) Fail(Annotate(s, "elastic core, feeding the learner"));
  });
  controller_ = std::thread([this] {
    const absl::Status s = Control();
    if (!s.ok() && !Stopping()) Fail(Annotate(s, "elastic scheduler"));
  });

  RemoteLearnerResult result;
  double busy = 0, best_success = 0;
  int64_t consumed = 0;
  int64_t step = learner_->optimizer_step();
  absl::Status failure;
  for (int64_t queue_step = 0; step < run.max_steps && !stop.Reached(); ++queue_step) {
    const absl::Time step_start = absl::Now();
    failure = scheduler_->service().BeginStep(queue_step, learner_->version(),
                                              learner_->optimizer_step());
    if (failure.ok()) failure = queue_->Join(kCoreCell, queue_step);
    absl::StatusOr<StreamingStepResult> trained;
    if (failure.ok()) {
      trained = RunStep(queue_step);
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
      ++steps_done_;
      continue;
    }
    const StreamingStepResult& r = *trained;
    meter_->StepDone(MeteredStepOf(r, queue_->report()));
    step = r.optimizer.step;
    optimizer_step_ = step;
    // Every step: a satellite joining the next one loads exactly these weights.
    failure = Publish();
    if (!failure.ok()) break;
    ++steps_done_;
    if (config_.learner.checkpoint_every > 0 && step % config_.learner.checkpoint_every == 0) {
      failure = SaveCheckpoint(step);
      if (!failure.ok()) break;
    }
    const StepReport report = queue_->report();
    busy += r.times.compute();
    consumed += data.trajectories;
    const double elapsed = absl::ToDoubleSeconds(absl::Now() - start_);
    const double reward = data.reward();
    const double success = data.success();
    nlohmann::json line =
        ElasticStepLine(r, learner_->version(), elapsed,
                        absl::ToDoubleSeconds(absl::Now() - step_start), data, report);
    line["requeued_micro_steps"] = report.requeued;
    {
      absl::MutexLock lock(&mu_);
      line["satellites_training"] = training_satellites_;
      line["episodes_in_flight"] = episodes_in_flight_;
    }
    failure = run_dir_->AppendMetrics(line);
    if (!failure.ok()) break;
    ++result.steps;
    result.last_reward = reward;
    result.last_success = success;
    best_success = std::max(best_success, success);
    if (progress.has_value()) {
      progress->Update(ProgressSnapshot{.step = step,
                                        .max_steps = run.max_steps,
                                        .reward = reward,
                                        .success = success,
                                        .learner_utilization = busy / std::max(1e-9, elapsed),
                                        .elapsed_seconds = elapsed,
                                        .max_wall_seconds = run.max_wall_seconds});
    }
  }
  if (progress.has_value()) progress->Finish();
  const std::string stopped_by(step >= run.max_steps ? "max_steps" : stop.Reason());
  const double wall = absl::ToDoubleSeconds(absl::Now() - start_);
  // The cells see "finished" in their heartbeats and leave while the services still answer.
  scheduler_->service().SetFinished();
  weights_->SetFinished();
  const absl::Time until = absl::Now() + options_.finished_linger;
  while (absl::Now() < until && !(options_.stop != nullptr && options_.stop->load())) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  Shutdown();
  stop_ = nullptr;
  if (const absl::Status first = FirstError(); !first.ok()) return first;
  if (!failure.ok() && !(absl::IsCancelled(failure) && stop.Reached())) return failure;

  std::vector<SwitchRecord> switches;
  int64_t lost = 0;
  {
    absl::MutexLock lock(&mu_);
    switches = switches_;
    lost = cells_lost_;
  }
  int64_t inserted = 0, registered = 0;
  for (const CellInfo& c : scheduler_->service().cells()) {
    inserted += c.finished;
    ++registered;
  }
  result.final_step = step;
  result.stopped = options_.stop != nullptr && options_.stop->load();
  result.summary = {
      {"mode", "elastic"},
      {"processes", true},
      {"steps", result.steps},
      {"final_step", step},
      {"version", learner_->version()},
      {"wall_seconds", wall},
      {"last_reward_mean", result.last_reward},
      {"last_success_rate", result.last_success},
      {"best_success_rate", best_success},
      {"episodes_finished_reported", inserted},
      {"trajectories_trained", consumed},
      {"learner_utilization", busy / std::max(1e-9, wall)},
      {"stopped_by", stopped_by},
      {"blas", blas_.ToJson()},
      {"elastic",
       {{"cells", config_.scheduler.cells},
        {"core_cells", 1},
        {"satellites", config_.scheduler.cells - 1},
        {"cells_registered", registered},
        {"cells_lost", lost},
        {"switches", switches.size()},
        {"controller", config_.scheduler.controller},
        {"to_train", SwitchStats(switches, true)},
        {"to_rollout", SwitchStats(switches, false)}}},
  };
  RETURN_IF_ERROR(run_dir_->WriteSummary(result.summary));
  return result;
}

}  // namespace

absl::StatusOr<RemoteLearnerResult> RunElasticCore(const JobConfig& config,
                                                   const ElasticCoreOptions& options) {
  SetEmulatedSlowdown(config.run.emulated_slowdown);
  ElasticCore core(config, options);
  RETURN_IF_ERROR(core.Init());
  return core.Train();
}

}  // namespace flywheel
