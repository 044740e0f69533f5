#include "flywheel/elastic/elastic_job.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "flywheel/actor/actor.h"
#include "flywheel/actor/actor_metrics.h"
#include "flywheel/buffer/buffer.h"
#include "flywheel/core/emulated_device.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/dist/membership.h"
#include "flywheel/elastic/training_meter.h"
#include "flywheel/env/env_executor.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/env/task_source.h"
#include "flywheel/learner/checkpoint.h"
#include "flywheel/learner/streaming_learner.h"
#include "flywheel/learner/trainer_state.h"
#include "flywheel/model/safetensors.h"
#include "flywheel/model/transformer.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/runtime/blas_choice.h"
#include "flywheel/elastic/elastic_step_line.h"
#include "flywheel/elastic/elastic_switches.h"
#include "flywheel/runtime/policy_eval.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/policy_text.h"
#include "flywheel/runtime/progress.h"
#include "flywheel/runtime/run_directory.h"
#include "flywheel/runtime/run_stop.h"
#include "flywheel/runtime/transformer_policy.h"
#include "flywheel/scheduler/elastic_control.h"
#include "flywheel/scheduler/hand_over.h"
#include "flywheel/scheduler/micro_step_queue.h"
#include "flywheel/scheduler/remaining_tokens.h"
#include "flywheel/scheduler/scheduler_log.h"
#include "flywheel/scheduler/role_controller.h"
#include "flywheel/scheduler/step_group.h"

namespace flywheel {
namespace {

using scheduler::CellRole;
using scheduler::SchedulerDecision;

// How long one blocking call waits before its loop rechecks whether to stop.
constexpr absl::Duration kCellPoll = absl::Milliseconds(100);
// A training satellite's wait for a micro-step: it bounds how late the cell
// sees that it is to go back to rollout.
constexpr absl::Duration kSatellitePoll = absl::Milliseconds(2);

// A model replica with its trainer and, for a satellite, its rollout actor.
struct Cell {
  int id = 0;  // 0 … C−1 are the core cells; satellite s is cell C + s
  Transformer model{nullptr};
  std::unique_ptr<StreamingLearner> learner;
  std::unique_ptr<StepGroup> group;
  std::unique_ptr<Actor> actor;          // satellites only
  std::atomic<bool> wants_train{false};  // the scheduler's target role
  std::atomic<bool> training{false};     // the role the cell is in now
  // The decision of a pending move to rollout (absl::ToUnixNanos; 0: none), taken by the cell's
  // thread when it gets there. A move to training is timed by the controller, which waits for it.
  std::atomic<int64_t> rollout_decided_ns{0};
  std::thread thread;  // a satellite's, or a core's other than cell 0 (which is Train's)
};

class ElasticJob {
 public:
  explicit ElasticJob(const JobConfig& config) : config_(config) {}
  ~ElasticJob() { Shutdown(); }

  absl::Status Init(const EmbeddedJobOptions& options);
  absl::StatusOr<EmbeddedJobResult> Train(const EmbeddedJobOptions& options);

 private:
  int cores() const { return static_cast<int>(config_.scheduler.core_cells); }
  int satellites() const { return static_cast<int>(cells_.size()) - cores(); }
  Cell& satellite(int s) { return *cells_[cores() + s]; }
  // Empty until Init has made every cell (Shutdown also runs after a failed Init).
  std::span<const std::unique_ptr<Cell>> satellite_cells() const {
    const size_t first = std::min(cells_.size(), static_cast<size_t>(cores()));
    return std::span(cells_).subspan(first);
  }
  absl::StatusOr<std::unique_ptr<Cell>> MakeCell(int id, std::shared_ptr<const WeightSnapshot> w);
  absl::Status Restore(const std::string& checkpoint);
  absl::Status SaveCheckpoint(int64_t step);
  absl::Status Sink(Trajectory t);
  int64_t AdmissionRoom() const;
  int64_t EpisodesFinished() const;

  // One streaming step on `cell`: claim and run micro-steps until none is left
  // (or, for a satellite told to leave, until it stops claiming), then the
  // step's reduce. nullopt: the satellite left the step without running anything.
  absl::StatusOr<std::optional<StreamingStepResult>> RunStep(Cell& cell, int64_t queue_step);
  absl::Status RunSatellite(Cell& cell);
  // A core cell other than cell 0: joins every step Train begins.
  absl::Status RunCore(Cell& cell);
  absl::Status TrainAsSatellite(Cell& cell);
  absl::Status Feed();
  absl::Status Control();
  absl::Status Move(const SchedulerDecision& decision);
  // Places `episodes` (parked ones, or those of a satellite leaving rollout) on the satellites
  // rolling out, within their slots (scheduler/hand_over.h); what fits nowhere is parked.
  // `again`: parked episodes placed again (not counted as parked a second time).
  absl::Status HandOver(std::vector<SuspendedEpisode> episodes, bool again = false);
  scheduler::SchedulerObservation Observe();
  void RecordSwitch(Cell& cell, bool to_train, absl::Time decided, int64_t handed,
                    int64_t in_place);
  void Publish();
  // At the end: no more moves or starts; every rollout actor hands its
  // in-flight episodes over at their boundary, so that they can be counted.
  // Returns how many episodes the stop cancels.
  int64_t Quiesce();
  void Shutdown();
  // The job stops: by request, its wall budget, or a thread's failure.
  bool Stopping() const { return stopping_.load() || (stop_ != nullptr && stop_->Reached()); }
  // A thread failed: the first failure is the job's; everyone is woken to stop.
  void Fail(absl::Status status);
  absl::Status FirstError() const;

  const JobConfig config_;
  absl::Time start_;
  std::vector<int64_t> env_steps_at_start_;  // ActorMetrics' env-call histogram at start_
  std::unique_ptr<EnvFactory> factory_;
  std::unique_ptr<EnvExecutor> executor_;
  PolicyText text_;  // the tokenizer and turn format the actors borrow
  ModelOptions model_options_;
  BlasChoice blas_;
  std::unique_ptr<RunDirectory> run_dir_;
  std::unique_ptr<CheckpointManager> checkpoints_;
  std::unique_ptr<Buffer> buffer_;
  std::unique_ptr<TaskSource> tasks_;  // shared by the satellites: handed_out() = dispatched
  std::unique_ptr<MicroStepQueue> queue_;
  std::unique_ptr<dist::Membership> membership_;
  scheduler::ElasticAdmission admission_;                  // set by Init
  std::unique_ptr<scheduler::RoleController> roles_;  // the controller thread's
  std::unique_ptr<scheduler::RemainingTokens> remaining_;  // scheduler.unit = "tokens"
  std::unique_ptr<TrainingMeter> meter_;                   // the backlog and the training rate
  std::unique_ptr<scheduler::SchedulerLog> log_;
  std::vector<std::unique_ptr<Cell>> cells_;  // the cores first; [0] begins every step
  std::thread feeder_;
  std::thread controller_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> quiescing_{false};  // the run is ending: no moves, no new episodes
  const RunStop* stop_ = nullptr;       // Train's
  std::atomic<int64_t> inserted_{0};
  // Learner steps ended (trained or with nothing trainable) and their weights published: what
  // admission counts from. Each consumed batch_groups groups of the buffer.
  std::atomic<int64_t> steps_done_{0};
  // The core's optimiser step, as the scheduler's thread reads it: the optimiser itself belongs
  // to the training thread.
  std::atomic<int64_t> optimizer_step_{0};

  mutable absl::Mutex mu_;
  std::vector<SwitchRecord> switches_ ABSL_GUARDED_BY(mu_);
  // Episodes suspended while no rolling-out satellite had a free slot: placed again at each tick.
  std::vector<SuspendedEpisode> parked_ ABSL_GUARDED_BY(mu_);
  // Hand-overs: episodes placed on another satellite, parked, and the most a taker held after
  // one (never above actor.episodes_in_flight).
  int64_t handed_over_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t times_parked_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t max_taker_held_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, StepData> step_data_ ABSL_GUARDED_BY(mu_);  // by queue step
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> inserted_ids_ ABSL_GUARDED_BY(mu_);
  int64_t duplicates_ ABSL_GUARDED_BY(mu_) = 0;
};

void ElasticJob::Fail(absl::Status status) {
  if (status.ok()) return;
  {
    absl::MutexLock lock(&mu_);
    if (first_error_.ok()) first_error_ = std::move(status);
  }
  stopping_.store(true);
  queue_->Cancel();
}

absl::Status ElasticJob::FirstError() const {
  absl::MutexLock lock(&mu_);
  return first_error_;
}

absl::StatusOr<std::unique_ptr<Cell>> ElasticJob::MakeCell(
    int id, std::shared_ptr<const WeightSnapshot> weights) {
  auto cell = std::make_unique<Cell>();
  cell->id = id;
  ASSIGN_OR_RETURN(cell->model, MakeInitialModel(model_options_));
  const OptimizerShard shard =
      id < cores() ? OptimizerShard{id, cores()} : OptimizerShard::Satellite(cores());
  cell->learner = std::make_unique<StreamingLearner>(
      config_.learner, config_.run.max_steps, cell->model->parameters(),
      TransformerPolicy(cell->model), nullptr, config_.sampling.temperature, 0, RealClock(), shard);
  cell->group = std::make_unique<StepGroup>(membership_.get(), id);
  if (id < cores()) return cell;
  const uint64_t seed = static_cast<uint64_t>(config_.run.seed) * 1000003u + id * 7919u;
  ASSIGN_OR_RETURN(std::unique_ptr<RolloutEngine> engine,
                   RolloutEngine::Create(config_.actor.engine, std::move(weights)));
  cell->actor = std::make_unique<Actor>(
      StrCat("cell-", id), config_.actor, config_.sampling, std::move(engine), factory_.get(),
      executor_.get(), text_.tokenizer.get(), tasks_.get(),
      [this](Trajectory t) { return Sink(std::move(t)); }, seed + 1, text_.turn_format.get());
  cell->actor->SetAdmission([this] { return AdmissionRoom(); });
  return cell;
}

absl::Status ElasticJob::Init(const EmbeddedJobOptions& options) {
  const SchedulerOptions& s = config_.scheduler;
  if (config_.learner.max_staleness < 0) {
    return absl::InvalidArgumentError(
        "run.mode = \"elastic\" admits the episodes of batches up to "
        "learner.max_staleness "
        "versions ahead of the learner; set learner.max_staleness >= 0 (0 = "
        "on-policy)");
  }
  admission_ = {.max_staleness = config_.learner.max_staleness,
                .batch_groups = config_.run.batch_groups,
                .group_size = config_.actor.group_size};
  RETURN_IF_ERROR(admission_.Validate());
  ASSIGN_OR_RETURN(factory_, EnvFactory::Create(config_.env));
  executor_ = std::make_unique<EnvExecutor>(EnvExecutor::OptionsFor(config_.env));
  ASSIGN_OR_RETURN(text_, MakePolicyText(config_, *factory_));
  ASSIGN_OR_RETURN(model_options_,
                   ResolveModelOptions(config_, *text_.tokenizer, text_.tokenizer_name));
  ASSIGN_OR_RETURN(blas_, ChooseBlasThreads(BlasRole::kEmbedded, config_.run.blas_threads,
                                            model_options_, config_.learner.token_budget));
  spdlog::info("{}", blas_.DebugString());
  // Every cell is one thread with one intra-op thread: cells are the unit of compute.
  torch::set_num_threads(1);
  ASSIGN_OR_RETURN(run_dir_, RunDirectory::Open(config_.run.runs_dir, config_.run.name,
                                                FormatJobConfig(config_), options.resume));
  checkpoints_ = std::make_unique<CheckpointManager>(
      CheckpointOptions{run_dir_->checkpoints().string(), config_.learner.keep_last});
  ASSIGN_OR_RETURN(log_, scheduler::SchedulerLog::Open(run_dir_->path() / "scheduler.jsonl"));

  BufferOptions buffer_options = config_.buffer;
  buffer_options.group_size = config_.actor.group_size;
  buffer_options.min_group_size = std::min(buffer_options.min_group_size, config_.actor.group_size);
  buffer_options.durable = false;
  buffer_options.remember_ids = 0;  // in process no insert is retried: no ids to remember
  // The staleness bound is applied to each step's data as it is added to the step's queue; the
  // buffer drops nothing, so that every admitted group reaches a step and admission (which
  // counts the groups the steps consumed) never waits for a group that was thrown away.
  buffer_options.max_staleness = -1;
  // Admission, not backpressure, bounds the pipeline: whatever was admitted must fit.
  const int64_t admitted_groups = (config_.learner.max_staleness + 1) * config_.run.batch_groups;
  buffer_options.max_size = std::max(buffer_options.max_size,
                                     admitted_groups + config_.actor.episodes_in_flight * s.cells);
  ASSIGN_OR_RETURN(buffer_, Buffer::Create(buffer_options));

  tasks_ = std::make_unique<TaskSource>(factory_->task_name(),
                                        static_cast<uint64_t>(config_.run.seed) * 1000003u,
                                        config_.actor.group_size);
  queue_ = std::make_unique<MicroStepQueue>(
      MicroStepQueueOptions::FromLearnerOptions(config_.learner, /*core_cell=*/0, cores()));
  dist::MembershipOptions membership;
  membership.group.name = "elastic step group";
  membership_ =
      std::make_unique<dist::Membership>(c10::make_intrusive<c10d::HashStore>(), membership);

  torch::manual_seed(static_cast<uint64_t>(config_.run.seed));
  for (int id = 0; id < cores(); ++id) {
    ASSIGN_OR_RETURN(std::unique_ptr<Cell> core, MakeCell(id, nullptr));
    cells_.push_back(std::move(core));
  }
  if (options.resume) {
    ASSIGN_OR_RETURN(std::optional<std::string> latest, checkpoints_->Latest());
    if (!latest.has_value()) {
      return absl::NotFoundError(
          StrCat("--resume: no complete checkpoint in ", checkpoints_->options().directory));
    }
    RETURN_IF_ERROR(Restore(*latest));
  }
  Cell& core_cell = *cells_[0];
  // Every core starts from cell 0's weights (its optimiser shard is its own).
  if (cores() > 1) {
    ASSIGN_OR_RETURN(std::vector<torch::Tensor> weights, core_cell.learner->CopyWeights());
    for (int id = 1; id < cores(); ++id) {
      const StreamingLearner& first = *core_cell.learner;
      RETURN_IF_ERROR(
          cells_[id]->learner->LoadWeights(weights, first.version(), first.optimizer_step()));
    }
  }
  buffer_->SetLearnerVersion(core_cell.learner->version());
  ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> snapshot,
                   MakeSnapshot(core_cell.model, core_cell.learner->version()));
  for (int id = cores(); id < s.cells; ++id) {
    ASSIGN_OR_RETURN(std::unique_ptr<Cell> cell, MakeCell(id, snapshot));
    cells_.push_back(std::move(cell));
  }

  // Before any episode finished, a fresh one is expected to fill one policy turn.
  remaining_ = std::make_unique<scheduler::RemainingTokens>(
      scheduler::RemainingTokens::kWindow, static_cast<double>(config_.actor.max_new_tokens));
  ASSIGN_OR_RETURN(roles_, scheduler::MakeElasticController(
                                    s, satellites(),
                                    static_cast<double>(config_.actor.episodes_in_flight),
                                    remaining_->Fresh()));
  ASSIGN_OR_RETURN(scheduler::WorkUnit unit, scheduler::ParseWorkUnit(s.unit));
  meter_ = std::make_unique<TrainingMeter>(unit);
  spdlog::info("elastic job: {} core cell(s), {} satellites; {}", cores(), satellites(),
               roles_->DebugString());
  return absl::OkStatus();
}

// Where core cell `core` of `cores` keeps its optimiser shard in a checkpoint: the checkpoint's
// own directory for one core (as every other job writes it), core-<i>/ for several.
std::string CoreStateDir(const std::string& checkpoint, int core, int cores) {
  return cores == 1 ? checkpoint : StrCat(checkpoint, "/core-", core);
}

absl::Status ElasticJob::Restore(const std::string& checkpoint) {
  Cell& core = *cells_[0];
  RETURN_IF_ERROR(LoadStateDict(StrCat(checkpoint, "/", kCheckpointModelFile), *core.model));
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
        ReadTrainerState(CoreStateDir(checkpoint, id, cores()), cells_[id]->learner->optimizer()));
  }
  return absl::OkStatus();
}

absl::Status ElasticJob::SaveCheckpoint(int64_t step) {
  // Called between two steps: every core has applied its shard of the last one (the step's
  // AgreeOk waits for all of them) and none has begun the next.
  return checkpoints_
      ->Save(step,
             [this](const std::string& dir) {
               RETURN_IF_ERROR(SaveStateDict(StrCat(dir, "/", kCheckpointModelFile), *cells_[0]->model));
               for (int id = 0; id < cores(); ++id) {
                 const std::string state = CoreStateDir(dir, id, cores());
                 std::error_code error;
                 std::filesystem::create_directories(state, error);
                 if (error) {
                   return absl::InternalError(
                       StrCat("checkpoint: creating ", state, ": ", error.message()));
                 }
                 RETURN_IF_ERROR(WriteTrainerState(state, cells_[id]->learner->optimizer()));
               }
               return absl::OkStatus();
             })
      .status();
}

absl::Status ElasticJob::Sink(Trajectory t) {
  remaining_->Observe(t.NumTrainable());
  {
    // An episode handed between cells must arrive once: count any id seen twice.
    absl::MutexLock lock(&mu_);
    if (!inserted_ids_.insert(t.id).second) ++duplicates_;
  }
  auto trajectory = std::make_shared<const Trajectory>(std::move(t));
  while (true) {
    // Not Stopping(): episodes that end while the run winds down (Quiesce) are still kept.
    if (stopping_.load()) return absl::CancelledError("the job is stopping");
    absl::Status status = buffer_->Insert(trajectory, absl::Now() + kCellPoll);
    if (absl::IsDeadlineExceeded(status)) continue;  // backpressure: try again
    if (status.ok()) inserted_.fetch_add(1);
    return status;
  }
}

int64_t ElasticJob::AdmissionRoom() const {
  if (quiescing_.load()) return 0;
  // Batches 0 … k + η may have been started once k steps are done and their weights published
  // (header comment; elastic_control.h).
  return admission_.Room(steps_done_.load(), tasks_->handed_out());
}

int64_t ElasticJob::EpisodesFinished() const {
  int64_t failed = 0;
  for (const auto& cell : satellite_cells()) failed += cell->actor->stats().episodes_failed;
  return inserted_.load() + failed;
}

absl::StatusOr<std::optional<StreamingStepResult>> ElasticJob::RunStep(Cell& cell,
                                                                       int64_t queue_step) {
  const bool satellite = cell.id >= cores();
  while (true) {
    if (Stopping()) break;  // the reduce decides whether this step still needs the cell
    if (satellite && !cell.wants_train.load()) {
      if (cell.learner->cell_micro_steps() == 0) {
        // Nothing of the step ran here: hand the claim back and leave at once.
        queue_->Requeue(cell.id).IgnoreError();
        cell.learner->AbandonStep();
        return std::nullopt;
      }
      break;  // stop claiming; the reduce keeps what this cell computed
    }
    absl::StatusOr<std::shared_ptr<const MicroStep>> claimed =
        queue_->Claim(cell.id, absl::Now() + (satellite ? kSatellitePoll : kCellPoll));
    if (absl::IsDeadlineExceeded(claimed.status())) continue;
    if (absl::IsCancelled(claimed.status())) break;
    if (!claimed.ok()) return claimed.status();
    if (*claimed == nullptr) break;  // the step is complete
    RETURN_IF_ERROR(cell.learner->RunMicroStep(**claimed));
    RETURN_IF_ERROR(queue_->Done(cell.id, (*claimed)->id));
  }
  absl::StatusOr<StreamingStepResult> result = ReduceStep(
      *queue_, *cell.group, *cell.learner, queue_step, [this] { return Stopping(); }, kCellPoll);
  if (absl::IsUnavailable(result.status())) return StreamingStepResult{};  // nothing trainable
  if (!result.ok()) return result.status();
  return *std::move(result);
}

void ElasticJob::RecordSwitch(Cell& cell, bool to_train, absl::Time decided, int64_t handed,
                              int64_t in_place) {
  const absl::Time now = absl::Now();
  SwitchRecord s;
  s.satellite = cell.id - cores();
  s.to_train = to_train;
  s.seconds = absl::ToDoubleSeconds(now - decided);
  s.episodes_handed = handed;
  s.finished_in_place = in_place;
  s.at = absl::ToDoubleSeconds(now - start_);
  s.Trace(TraceRecorder::NowNanos());
  log_->Append(s.ToJson()).IgnoreError();
  RecordSwitchMetrics(s);
  absl::MutexLock lock(&mu_);
  switches_.push_back(s);
}

absl::Status ElasticJob::TrainAsSatellite(Cell& cell) {
  while (cell.wants_train.load() && !Stopping()) {
    // The step being filled now; a complete one cannot be joined: wait for the next.
    const int64_t current = queue_->report().step;
    absl::Status joined = queue_->Join(cell.id, current);
    if (!joined.ok()) {
      const absl::Status next = queue_->AwaitStep(current + 1, absl::Now() + kCellPoll);
      if (!next.ok() && !absl::IsDeadlineExceeded(next)) return next;
      continue;
    }
    // The core's weights cannot change before this cell reaches the step's reduce.
    Cell& core = *cells_[0];
    if (cell.learner->version() != core.learner->version()) {
      ASSIGN_OR_RETURN(std::vector<torch::Tensor> weights, core.learner->CopyWeights());
      RETURN_IF_ERROR(cell.learner->LoadWeights(weights, core.learner->version(),
                                                core.learner->optimizer_step()));
    }
    RETURN_IF_ERROR(RunStep(cell, current).status());
  }
  return absl::OkStatus();
}

absl::Status ElasticJob::RunCore(Cell& cell) {
  torch::set_num_threads(1);
  for (int64_t queue_step = 0; !Stopping(); ++queue_step) {
    absl::Status begun;
    do {
      begun = queue_->AwaitStep(queue_step, absl::Now() + kCellPoll);
    } while (absl::IsDeadlineExceeded(begun) && !Stopping());
    if (absl::IsCancelled(begun) || Stopping()) return absl::OkStatus();
    RETURN_IF_ERROR(begun);
    RETURN_IF_ERROR(queue_->Join(cell.id, queue_step));
    RETURN_IF_ERROR(RunStep(cell, queue_step).status());
  }
  return absl::OkStatus();
}

absl::Status ElasticJob::RunSatellite(Cell& cell) {
  torch::set_num_threads(1);
  while (!Stopping() && !quiescing_.load()) {
    if (cell.wants_train.load()) {
      cell.training = true;
      RETURN_IF_ERROR(TrainAsSatellite(cell));
      continue;
    }
    cell.training = false;
    if (const int64_t decided = cell.rollout_decided_ns.exchange(0); decided != 0) {
      RecordSwitch(cell, /*to_train=*/false, absl::FromUnixNanos(decided), 0, 0);
    }
    // Returns when the controller suspends or drains this actor, or at Stop.
    RETURN_IF_ERROR(cell.actor->Run(-1));
  }
  return absl::OkStatus();
}

absl::Status ElasticJob::Move(const SchedulerDecision& decision) {
  Cell& cell = satellite(decision.satellite);
  const absl::Time decided = absl::Now();
  if (decision.move == SchedulerDecision::Move::kToRollout) {
    cell.rollout_decided_ns = absl::ToUnixNanos(decided);
    cell.wants_train = false;  // the cell leaves training at its next micro-step boundary
    return absl::OkStatus();
  }
  // A move to rollout the cell has not carried out yet is void: it stays in training.
  cell.rollout_decided_ns = 0;
  cell.wants_train = true;
  int64_t moved = 0, in_place = 0;
  // Run may not have started yet when the first Suspend is served: repeat until the cell trains.
  while (!cell.training.load() && !Stopping() && !quiescing_.load()) {
    absl::StatusOr<ActorSwitch> handed =
        config_.scheduler.drain_on_switch ? cell.actor->Drain() : cell.actor->Suspend();
    if (!handed.ok()) return handed.status();
    in_place += handed->finished_in_place;
    moved += static_cast<int64_t>(handed->episodes.size());
    if (handed->episodes.empty()) {
      absl::SleepFor(absl::Milliseconds(1));
      continue;
    }
    // The controller has already applied this move to its role table: the cell is no taker.
    RETURN_IF_ERROR(HandOver(std::move(handed->episodes)));
  }
  // The cell has left rollout and entered its training loop.
  RecordSwitch(cell, /*to_train=*/true, decided, moved, in_place);
  return absl::OkStatus();
}

absl::Status ElasticJob::HandOver(std::vector<SuspendedEpisode> episodes, bool again) {
  if (episodes.empty()) return absl::OkStatus();
  std::vector<int> takers;  // satellites rolling out, as indices of `capacity`
  std::vector<scheduler::CellCapacity> capacity;
  for (int s = 0; s < satellites(); ++s) {
    const Cell& cell = satellite(s);
    if (roles_->role(s) != CellRole::kRollout || cell.wants_train.load() ||
        cell.training.load()) {
      continue;
    }
    takers.push_back(s);
    capacity.push_back({.episodes = cell.actor->in_flight(),
                        .slots = config_.actor.episodes_in_flight});
  }
  std::vector<double> kv_tokens;  // the context each taker prefills again
  for (const SuspendedEpisode& e : episodes) {
    kv_tokens.push_back(static_cast<double>(e.trajectory.tokens.size()));
  }
  const std::vector<int> placed = scheduler::PlaceEpisodes(kv_tokens, capacity);
  std::vector<std::vector<SuspendedEpisode>> adopted(takers.size());
  std::vector<SuspendedEpisode> parked;
  for (size_t e = 0; e < episodes.size(); ++e) {
    if (placed[e] < 0) {
      parked.push_back(std::move(episodes[e]));
    } else {
      adopted[placed[e]].push_back(std::move(episodes[e]));
    }
  }
  int64_t handed = 0, max_held = 0;
  for (size_t t = 0; t < takers.size(); ++t) {
    if (adopted[t].empty()) continue;
    handed += static_cast<int64_t>(adopted[t].size());
    max_held = std::max(max_held, capacity[t].episodes);
    RETURN_IF_ERROR(satellite(takers[t]).actor->Adopt(std::move(adopted[t])));
  }
  absl::MutexLock lock(&mu_);
  handed_over_ += handed;
  if (!again) times_parked_ += static_cast<int64_t>(parked.size());
  max_taker_held_ = std::max(max_taker_held_, max_held);
  for (SuspendedEpisode& e : parked) parked_.push_back(std::move(e));
  return absl::OkStatus();
}

scheduler::SchedulerObservation ElasticJob::Observe() {
  const bool tokens = roles_->unit() == scheduler::WorkUnit::kTokens;
  std::vector<scheduler::SatelliteReport> reports;
  for (int s = 0; s < satellites(); ++s) {
    const Cell& cell = satellite(s);
    const ActorStats stats = cell.actor->stats();
    scheduler::SatelliteReport r;
    r.rolling_out = roles_->role(s) == CellRole::kRollout && !cell.training.load();
    r.finished = stats.episodes_finished + stats.episodes_failed;
    r.held = cell.actor->in_flight();
    r.slots = config_.actor.episodes_in_flight;
    if (tokens) r.remaining_tokens = remaining_->Remaining(cell.actor->InFlightPolicyTokens());
    reports.push_back(r);
  }
  int64_t parked = 0;
  {
    absl::MutexLock lock(&mu_);
    parked = static_cast<int64_t>(parked_.size());
  }
  const StepReport running = queue_->report();
  int64_t done = 0;
  for (const auto& [cell, ids] : running.ran_by) done += static_cast<int64_t>(ids.size());
  const int64_t waiting = buffer_->Info().table.size * config_.actor.group_size;
  const scheduler::TrainingReport training = meter_->Report(
      waiting, {.episodes = running.complete ? 0 : running.kept,
                           .tokens = running.complete ? 0 : running.trainable_tokens,
                           .micro_steps = running.micro_steps,
                           .done = done});
  scheduler::SchedulerObservation observation = scheduler::ObserveCells(
      absl::Now(), optimizer_step_.load(), AdmissionRoom(), reports, training, parked);
  if (tokens) {
    observation.capacity_per_cell =
        static_cast<double>(config_.actor.episodes_in_flight) * remaining_->Fresh();
  }
  return observation;
}

absl::Status ElasticJob::Control() {
  const absl::Duration tick = absl::Seconds(config_.scheduler.tick_seconds);
  while (!Stopping() && !quiescing_.load()) {
    absl::SleepFor(tick);
    std::vector<SuspendedEpisode> parked;
    {
      absl::MutexLock lock(&mu_);
      parked.swap(parked_);
    }
    RETURN_IF_ERROR(HandOver(std::move(parked), /*again=*/true));
    ASSIGN_OR_RETURN(SchedulerDecision decision, roles_->Decide(Observe()));
    if (decision.changed) RETURN_IF_ERROR(log_->Append(decision));
    if (decision.move != SchedulerDecision::Move::kNone) RETURN_IF_ERROR(Move(decision));
  }
  return absl::OkStatus();
}

absl::Status ElasticJob::Feed() {
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
      absl::StatusOr<std::vector<SampledItem>> items =
          buffer_->Sample(batch_groups - groups, absl::Now() + kCellPoll);
      if (absl::IsDeadlineExceeded(items.status())) continue;
      if (absl::IsCancelled(items.status()) || absl::IsFailedPrecondition(items.status())) {
        return absl::OkStatus();  // the buffer closed: the job is stopping
      }
      if (!items.ok()) return items.status();
      std::vector<Trajectory> trajectories;
      int64_t tokens = 0;
      for (const SampledItem& sampled : *items) {
        for (const ItemMember& member : sampled.item->members) {
          const Trajectory& t = *member.trajectory;
          data.Add(t, config_.run.success_reward);
          tokens += t.NumTrainable();
          trajectories.push_back(t);
        }
        ++groups;
      }
      meter_->Sampled(static_cast<int64_t>(trajectories.size()), tokens);
      RETURN_IF_ERROR(queue_->Add(std::move(trajectories)));
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

void ElasticJob::Publish() {
  Cell& core = *cells_[0];
  absl::StatusOr<std::shared_ptr<const WeightSnapshot>> snapshot =
      MakeSnapshot(core.model, core.learner->version());
  if (!snapshot.ok()) {
    spdlog::warn("elastic job: snapshot: {}", snapshot.status().message());
    return;
  }
  for (const auto& cell : satellite_cells()) cell->actor->PublishSnapshot(*snapshot);
}

int64_t ElasticJob::Quiesce() {
  quiescing_.store(true);
  if (controller_.joinable()) controller_.join();
  int64_t in_flight = 0;
  for (const auto& cell : satellite_cells()) {
    absl::StatusOr<ActorSwitch> handed = cell->actor->Suspend();
    if (handed.ok()) in_flight += static_cast<int64_t>(handed->episodes.size());
  }
  absl::MutexLock lock(&mu_);
  return in_flight + static_cast<int64_t>(parked_.size());
}

void ElasticJob::Shutdown() {
  stopping_.store(true);
  if (queue_ != nullptr) queue_->Cancel();
  if (buffer_ != nullptr) buffer_->Close();
  for (const auto& cell : satellite_cells()) cell->actor->Stop();
  if (controller_.joinable()) controller_.join();
  for (size_t i = 1; i < cells_.size(); ++i) {
    if (cells_[i]->thread.joinable()) cells_[i]->thread.join();
  }
  if (feeder_.joinable()) feeder_.join();
  if (executor_ != nullptr) executor_->Close([this] { factory_->Interrupt(); });
}

absl::StatusOr<EmbeddedJobResult> ElasticJob::Train(const EmbeddedJobOptions& options) {
  const RunOptions& run = config_.run;
  std::optional<ProgressReporter> progress;
  if (options.progress != nullptr) {
    progress.emplace(options.progress, options.progress_is_terminal, absl::Seconds(10));
  }
  start_ = absl::Now();
  optimizer_step_ = cells_[0]->learner->optimizer_step();  // before the threads start
  env_steps_at_start_ = ActorMetrics::Get().env_step_seconds->BucketCounts();
  const RunStop stop(run.max_wall_seconds, options.stop, start_);
  stop_ = &stop;
  for (size_t i = 1; i < cells_.size(); ++i) {
    Cell* cell = cells_[i].get();
    cell->thread = std::thread([this, cell] {
      const absl::Status s = cell->id < cores() ? RunCore(*cell) : RunSatellite(*cell);
      if (!s.ok() && !Stopping()) Fail(Annotate(s, StrCat("elastic job, cell ", cell->id)));
    });
  }
  feeder_ = std::thread([this] {
    const absl::Status s = Feed();
    if (!s.ok() && !Stopping()) Fail(Annotate(s, "elastic job, feeding the learner"));
  });
  controller_ = std::thread([this] {
    const absl::Status s = Control();
    if (!s.ok() && !Stopping()) Fail(Annotate(s, "elastic scheduler"));
  });

  Cell& core = *cells_[0];
  EmbeddedJobResult result;
  double busy = 0;
  int64_t consumed = 0;
  int64_t step = core.learner->optimizer_step();
  absl::Status failure;
  for (int64_t queue_step = 0; step < run.max_steps && !stop.Reached(); ++queue_step) {
    const absl::Time step_start = absl::Now();
    failure = queue_->BeginStep(queue_step, core.learner->version());
    if (failure.ok()) failure = queue_->Join(core.id, queue_step);
    absl::StatusOr<std::optional<StreamingStepResult>> trained;
    if (failure.ok()) {
      trained = RunStep(core, queue_step);
      failure = trained.status();
    }
    if (const absl::Status first = FirstError(); !first.ok()) failure = first;
    if (!failure.ok()) break;
    const StreamingStepResult& r = **trained;
    const StepReport report = queue_->report();
    meter_->StepDone(MeteredStepOf(r, report));
    if (r.normaliser == 0) {  // nothing in the step was trainable (all too stale)
      ++steps_done_;
      for (const auto& cell : satellite_cells()) cell->actor->Wake();
      continue;
    }
    step = r.optimizer.step;
    optimizer_step_ = step;
    buffer_->SetLearnerVersion(core.learner->version());
    // Training satellites received the new weights in the step's reduce; rollout engines get
    // them here, before admission opens the next batch, so that its episodes start on them.
    if (step % config_.learner.publish_every == 0) Publish();
    ++steps_done_;
    for (const auto& cell : satellite_cells()) cell->actor->Wake();
    if (config_.learner.checkpoint_every > 0 && step % config_.learner.checkpoint_every == 0) {
      failure = SaveCheckpoint(step);
      if (!failure.ok()) break;
    }
    StepData data;
    {
      absl::MutexLock lock(&mu_);
      data = step_data_[queue_step];
      step_data_.erase(queue_step);
    }
    busy += r.times.compute();
    consumed += data.trajectories;
    const double elapsed = absl::ToDoubleSeconds(absl::Now() - start_);
    const double reward = data.reward();
    const double success = data.success();
    int training = 0;
    for (const auto& cell : satellite_cells()) training += cell->training.load();
    nlohmann::json line =
        ElasticStepLine(r, core.learner->version(), elapsed,
                        absl::ToDoubleSeconds(absl::Now() - step_start), data, report);
    line["satellites_training"] = training;
    line["episodes_in_flight"] = tasks_->handed_out() - EpisodesFinished();
    failure = run_dir_->AppendMetrics(line);
    if (!failure.ok()) break;
    ++result.steps;
    result.last_reward = reward;
    result.last_success = success;
    result.best_success = std::max(result.best_success, success);
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
  const std::string_view stopped_by = step >= run.max_steps ? "max_steps" : stop.Reason();
  const double wall = absl::ToDoubleSeconds(absl::Now() - start_);
  const int64_t cancelled = Quiesce();
  Shutdown();
  stop_ = nullptr;
  if (const absl::Status first = FirstError(); !first.ok()) return first;
  // A stop request or the wall budget cancels the step in progress: not a failure.
  if (!failure.ok() && !(absl::IsCancelled(failure) && stop.Reached())) return failure;
  result.final_step = step;

  ActorStats stats;
  for (const auto& cell : satellite_cells()) {
    const ActorStats s = cell->actor->stats();
    stats.episodes_finished += s.episodes_finished;
    stats.episodes_failed += s.episodes_failed;
    stats.tokens_generated += s.tokens_generated;
    stats.tokens_discarded += s.tokens_discarded;
  }
  std::vector<SwitchRecord> switches;
  int64_t duplicates = 0;
  nlohmann::json hand_over;
  {
    absl::MutexLock lock(&mu_);
    switches = switches_;
    duplicates = duplicates_;
    hand_over = {{"episodes_placed", handed_over_},
                 {"episodes_parked", times_parked_},
                 {"max_taker_held", max_taker_held_},
                 {"slots", config_.actor.episodes_in_flight}};
  }
  const BufferInfo info = buffer_->Info();
  result.summary = {
      {"mode", "elastic"},
      {"steps", result.steps},
      {"final_step", step},
      {"version", core.learner->version()},
      {"wall_seconds", wall},
      {"last_reward_mean", result.last_reward},
      {"last_success_rate", result.last_success},
      {"best_success_rate", result.best_success},
      {"episodes_dispatched", tasks_->handed_out()},
      {"episodes_inserted", inserted_.load()},
      {"episodes_failed", stats.episodes_failed},
      {"episodes_cancelled_at_stop", cancelled},
      {"episodes_duplicated", duplicates},
      {"tokens_generated", stats.tokens_generated},
      {"env_step_seconds", ActorMetrics::Get().EnvStepSecondsSince(env_steps_at_start_)},
      {"tokens_discarded", stats.tokens_discarded},
      {"trajectories_trained", consumed},
      {"learner_utilization", busy / std::max(1e-9, wall)},
      {"stopped_by", std::string(stopped_by)},
      {"blas", blas_.ToJson()},
      {"elastic",
       {{"cells", config_.scheduler.cells},
        {"core_cells", cores()},
        {"satellites", satellites()},
        {"switches", switches.size()},
        {"controller", config_.scheduler.controller},
        {"to_train", SwitchStats(switches, true)},
        {"to_rollout", SwitchStats(switches, false)},
        {"hand_over", hand_over}}},
      {"groups",
       {{"sampled", info.sampled},
        {"left_in_buffer", info.table.size},
        {"dropped_stale", info.dropped_stale},
        {"dropped_incomplete", info.dropped_incomplete_group}}},
  };
  if (run.eval_episodes > 0 && stopped_by != "signal") {
    ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> weights,
                     MakeSnapshot(core.model, core.learner->version()));
    ASSIGN_OR_RETURN(PolicyEvalResult eval,
                     EvaluatePolicy(config_, *factory_, text_, std::move(weights),
                                    run.eval_episodes, static_cast<uint64_t>(run.seed)));
    result.eval = eval;
    result.summary["eval"] = eval.ToJson();
  }
  RETURN_IF_ERROR(run_dir_->WriteSummary(result.summary));
  return result;
}

}  // namespace

absl::StatusOr<EmbeddedJobResult> RunElasticJob(const JobConfig& config,
                                                const EmbeddedJobOptions& options) {
  SetEmulatedSlowdown(config.run.emulated_slowdown);
  ElasticJob job(config);
  RETURN_IF_ERROR(job.Init(options));
  return job.Train(options);
}

}  // namespace flywheel
