#include "flywheel/sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "flywheel/buffer/group_assembler.h"
#include "flywheel/buffer/rate_limiter.h"
#include "flywheel/core/clock.h"
#include "flywheel/core/metrics.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/learner/staleness.h"
#include "flywheel/runtime/run_directory.h"
#include "flywheel/scheduler/elastic_control.h"
#include "flywheel/scheduler/hand_over.h"
#include "flywheel/scheduler/remaining_tokens.h"
#include "flywheel/scheduler/scheduler_log.h"
#include "flywheel/sim/cost_model.h"

namespace flywheel::sim {
namespace {

using scheduler::CellRole;
using scheduler::SchedulerDecision;

enum class EventKind : uint8_t {
  kGenerated,      // an episode's turn of generation ended (id: episode slot, tag: its epoch)
  kEnvDone,        // an environment step returned (id: episode slot, tag: its epoch)
  kMicroStepDone,  // a training cell finished a micro-step (cell)
  kReduceDone,     // the step's gradients are reduced and applied: a new version
  kWeightsArrive,  // a rollout cell received version `tag` (cell)
  kPublished,      // version `tag` reached every rollout cell: admission counts it
  kSwitchDone,     // a cell finished a role switch (cell)
  kTick,           // the elastic controller looks at the water level
  kDeadline,       // an episode's time budget may have run out (id: episode slot, tag: its index)
};

// Simulated time without a learner step after which a run is reported stalled (the elastic
// controller's ticks never let the event queue run dry).
constexpr double kStallSeconds = 30 * 24 * 3600.0;

struct Event {
  double time;
  uint64_t seq;  // insertion order: equal times pop first-in first-out, so runs are reproducible
  EventKind kind;
  int32_t cell;
  int64_t id;
  int64_t tag;
};

struct EventAfter {
  bool operator()(const Event& a, const Event& b) const {
    return a.time != b.time ? a.time > b.time : a.seq > b.seq;
  }
};

// What a cell does. The to_* states are switches in progress.
enum class CellState { kRollout, kTrain, kToTrain, kToRollout };

std::string_view CellStateName(CellState s) {
  switch (s) {
    case CellState::kRollout:
      return "rollout";
    case CellState::kTrain:
      return "train";
    case CellState::kToTrain:
      return "to_train";
    case CellState::kToRollout:
      return "to_rollout";
  }
  return "unknown";
}

struct Cell {
  CellState state = CellState::kRollout;
  CellRole target = CellRole::kRollout;  // where the scheduler wants it
  int64_t version = 0;                   // the weights it generates with
  std::vector<int64_t> episodes;         // episode slots assigned to it
  double kv_tokens = 0;                  // the contexts of those episodes, in tokens
  int64_t dispatched = 0;                // episodes it started
  int64_t finished = 0;                  // episodes that ended on it
  int64_t generating = 0;                // of those, in a generation now
  bool in_micro_step = false;
  double micro_tokens = 0;  // of the micro-step it runs
  double since = 0;  // start of the current generation busy period / micro-step / switch
  // Cell-seconds: generating (>= 1 episode in a generation), training, switching.
  double rollout_busy = 0;
  double train_busy = 0;
  double switching = 0;
};

struct Episode {
  int64_t index = 0;     // handout number: group index / group_size, batch group / batch_groups
  int32_t cell = -1;     // -1: parked (no rollout cell to take it)
  int32_t position = 0;  // in its cell's `episodes`
  int32_t turn = 0;      // turns whose generation ended
  uint32_t epoch = 0;    // bumped when a pending generation is cancelled
  bool generating = false;
  bool in_env = false;        // waiting for an environment step
  bool resetting = false;     // that step is the reset (reset_env_step), before the first turn
  bool full_prefill = false;  // resumed on another cell: its whole context is prefilled
  EpisodeShape shape;
  int64_t context = 0;
  // Versions of the kept generated tokens: those of the turns whose generation ended (a turn
  // cancelled by a hand-over or a budget leaves no tokens). kNoVersion: none yet.
  int64_t min_version = kNoVersion;
  int64_t max_version = kNoVersion;
  int64_t generation_version = 0;  // the cell's weights when the current generation began
  double generation_start = 0;
  double generation_seconds = 0;
  // actor.episode_time_budget_s: the budget counts while the episode is on a cell; parked, it
  // waits uncharged (as a job does not charge the time between two actors) with no deadline.
  double deadline = INFINITY;
  double budget_used = 0;   // before budget_since
  double budget_since = 0;  // when the budget last started counting
  bool timed_out = false;
};

// What a fresh episode is expected to generate, before any has finished: the token unit's
// prior (remaining_tokens.h).
double FreshEpisodeTokens(const WorkloadOptions& w) {
  const EpisodeOptions& e = w.episode;
  if (e.length == LengthKind::kTrace) {
    double sum = 0;
    for (int64_t g : e.trace_generated_tokens) sum += static_cast<double>(g);
    return std::max(1.0, sum / std::max<size_t>(1, e.trace_generated_tokens.size()));
  }
  return std::max(1.0, (e.mean_tokens - static_cast<double>(e.prompt_tokens)) *
                           e.generated_fraction);
}

struct Group {
  std::vector<std::shared_ptr<const Trajectory>> members;
  int64_t tokens = 0;  // of its members' trajectories
};

class Simulation {
 public:
  // `clock` is borrowed: the cost model's latency phases read it too.
  Simulation(const SimConfig& config, const SimulateOptions& options, CostModel cost,
             VirtualClock* clock)
      : config_(config),
        options_(options),
        cost_(std::move(cost)),
        rng_(static_cast<uint64_t>(config.run.seed)),
        claim_rng_(static_cast<uint64_t>(config.run.seed) * 104729u + 3),
        env_latency_(cost_.NewEnvLatency(static_cast<uint64_t>(config.run.seed) * 7919u + 1)),
        clock_(clock),
        assembler_(config.run.group_size, config.run.group_size, absl::InfiniteDuration()),
        limiter_(RateLimiterOptions::Queue(config.buffer.max_size)),
        staleness_(config.learner.max_staleness),
        remaining_(scheduler::RemainingTokens::kWindow, FreshEpisodeTokens(config.workload)),
        lag_histogram_(StalenessFilter::LagBounds()) {}

  absl::Status Init();
  absl::StatusOr<SimResult> Run();

 private:
  // --- time and events
  void Schedule(double delay, EventKind kind, int32_t cell, int64_t id = 0, int64_t tag = 0);
  absl::Time Now() { return clock_->Now(); }

  // --- roles
  bool IsSatellite(int c) const { return c >= core_cells_; }
  int SatelliteCell(int satellite) const { return core_cells_ + satellite; }
  void SetState(int c, CellState state);
  void RequestRole(int c, CellRole role);
  void StartSwitch(int c);
  void OnSwitchDone(int c);
  bool Drains(int c) const;
  void HandOver(int c);
  // Places parked episodes on the rollout cells that have room, least loaded first.
  void PlaceParked();
  std::vector<scheduler::CellCapacity> TakerCapacity(std::vector<int>& takers, int leaving) const;
  void Resume(int64_t slot, int c);
  void ArmDeadline(int64_t slot, double budget_left);
  void PauseBudget(Episode& e);
  void OnDeadline(int64_t slot, int64_t index);

  // --- rollout
  int64_t AdmissionRoom() const;
  void FillCell(int c);
  void FillRolloutCells();
  void StartEpisode(int c);
  void AssignToCell(int64_t slot, int c);
  void GrowContext(Episode& e, int64_t tokens);
  void RemoveFromCell(int64_t slot);
  void BeginGeneration(int64_t slot);
  void EndGeneration(Episode& e);
  void CancelGeneration(Episode& e);
  void OnGenerated(int64_t slot, uint32_t epoch);
  void OnEnvDone(int64_t slot, uint32_t epoch);
  void FinishEpisode(int64_t slot);
  void InsertGroup(std::vector<ItemMember> members);
  void RetryBlockedInserts();

  // --- training
  bool AllCellsTrain() const;
  bool BufferStale(const Group& group) const;
  std::optional<Group> SampleGroup(bool& sampled);
  int64_t MicroSteps(int64_t tokens) const;
  void TryStartStep();
  void StreamGroups();
  void OpenStep();
  int64_t AddToStep(const Group& group);
  void ClaimWaiting();
  void MaybeReduce();
  void ClaimMicroStep(int c);
  void OnMicroStepDone(int c);
  void OnReduceDone();
  void Publish();
  void OnPublished(int64_t steps);
  void ColocatedControl();
  absl::Status OnTick();
  scheduler::SchedulerObservation Observe();
  double BacklogTokens() const;
  double MeanTrainedTokens() const;

  // --- outputs
  struct Usage {
    double rollout = 0, train = 0, switching = 0;
  };
  Usage UsageNow() const;
  nlohmann::json UsageJson(const Usage& now, const Usage& before, double seconds) const;
  // Timeline lines are built only when kept: a colocated run on 1,024 cells changes roles
  // millions of times.
  bool KeepTimelineLine();
  void TimelineRole(int c);
  void TimelineStep();
  nlohmann::json Summary(std::string_view stopped_by, double real_seconds) const;

  const SimConfig& config_;
  const SimulateOptions options_;
  const CostModel cost_;
  std::mt19937_64 rng_;
  std::mt19937_64 claim_rng_;  // the order in which waiting cells claim a new step
  std::unique_ptr<LatencyModel> env_latency_;
  VirtualClock* const clock_;  // what the policies see; borrowed
  double now_ = 0;      // seconds since the start, the same instant as clock_
  uint64_t seq_ = 0;
  std::priority_queue<Event, std::vector<Event>, EventAfter> events_;
  int64_t events_done_ = 0;

  // The production policies.
  GroupAssembler assembler_;
  RateLimiter limiter_;
  StalenessFilter staleness_;
  scheduler::ElasticAdmission admission_;
  scheduler::PipelineAdmission pipeline_;  // async with run.max_pipeline_batches
  std::unique_ptr<scheduler::RoleController> controller_;  // elastic
  // The token unit's estimate of what the episodes in flight still generate.
  scheduler::RemainingTokens remaining_;

  int core_cells_ = 0;  // elastic: cells [0, core_cells_) always train
  std::vector<Cell> cells_;
  std::vector<Episode> episodes_;  // by slot
  std::vector<int64_t> free_slots_;
  std::vector<int64_t> parked_;          // slots of episodes no rollout cell could take
  std::vector<int64_t> episode_tokens_;  // by handout index: the finished trajectory's length

  std::deque<Group> table_;       // groups inserted, oldest first
  std::vector<Group> collected_;  // taken by the learner for its next step
  std::deque<Group> blocked_;     // groups whose insert the rate limiter holds back
  int64_t handed_out_ = 0;
  int64_t finished_ = 0;
  int64_t failed_ = 0;
  int64_t timed_out_ = 0;
  int64_t inserted_groups_ = 0;
  int64_t tokens_generated_ = 0;
  double tokens_discarded_ = 0;
  int64_t handovers_ = 0;
  int64_t parked_total_ = 0;     // hand-overs that found no cell with room
  int64_t max_cell_episodes_ = 0;  // the most episodes one cell held at once
  double max_cell_kv_ = 0;         // the most KV tokens one cell held at once

  // The learner.
  int64_t version_ = 0;
  int64_t steps_done_ = 0;
  int64_t steps_published_ = 0;  // steps whose weights reached the rollout cells
  // Elastic mode with learner.token_budget > 0 streams a step as the elastic job's queue does
  // (MicroStepQueue): the step opens when the previous one ends, each group is added as it
  // arrives, and a micro-step is pending as soon as a token budget's worth is buffered.
  bool streaming_ = false;
  double stream_budget_ = 0;  // tokens per micro-step
  bool step_running_ = false;  // open (streaming) or started
  bool step_closed_ = false;   // all of the step's groups are in
  bool reducing_ = false;
  int64_t step_groups_ = 0;
  double buffered_tokens_ = 0;        // added, not yet in a micro-step (streaming)
  std::deque<double> pending_micro_;  // the tokens of each micro-step not yet claimed
  int64_t micro_running_ = 0;         // claimed, not finished
  int64_t step_micro_steps_ = 0;
  std::vector<bool> participated_;
  int64_t participants_ = 0;
  double core_busy_step_ = 0;  // cell 0's training seconds in this step
  int64_t step_trajectories_ = 0;
  int64_t step_dropped_ = 0;
  int64_t step_timed_out_ = 0;
  int64_t step_tokens_ = 0;
  std::map<int64_t, int64_t> step_lag_counts_;
  int64_t trained_trajectories_ = 0;
  int64_t trained_tokens_ = 0;
  int64_t dropped_stale_ = 0;
  int64_t dropped_stale_tokens_ = 0;
  // The training cost the controller sees, measured as a job measures it: seconds of micro-steps
  // over their tokens (one cell).
  double micro_seconds_ = 0;
  double micro_tokens_ = 0;
  double micro_steps_per_step_ = 0;  // scheduler::AverageMicroSteps over the steps so far
  int64_t buffer_dropped_stale_ = 0;  // groups the table dropped as too stale
  int64_t buffer_dropped_trajectories_ = 0;
  std::map<int64_t, int64_t> lag_counts_;
  Histogram lag_histogram_;
  bool colocated_training_ = false;  // colocated: the cells are (moving to) training

  // Outputs.
  std::vector<nlohmann::json> metrics_;
  std::vector<nlohmann::json> timeline_;
  int64_t timeline_dropped_ = 0;
  std::vector<SchedulerDecision> decisions_;
  int64_t switches_to_train_ = 0;
  int64_t switches_to_rollout_ = 0;
  Usage last_usage_;
  double last_step_time_ = 0;
  double time_to_half_ = -1;
};

void Simulation::Schedule(double delay, EventKind kind, int32_t cell, int64_t id, int64_t tag) {
  events_.push(Event{now_ + std::max(0.0, delay), seq_++, kind, cell, id, tag});
}

absl::Status Simulation::Init() {
  const int cells = static_cast<int>(cost_.replicas());
  cells_.resize(cells);
  participated_.assign(cells, false);
  const SimMode mode = config_.run.mode;
  admission_ = {.max_staleness = mode == SimMode::kColocated ? 0 : config_.learner.max_staleness,
                .batch_groups = config_.run.batch_groups,
                .group_size = config_.run.group_size};
  RETURN_IF_ERROR(admission_.Validate());
  if (mode == SimMode::kAsync) {
    pipeline_ = scheduler::PipelineAdmission::For(config_.run.max_pipeline_batches,
                                                  config_.run.batch_groups, config_.run.group_size);
    const int64_t rollout_devices =
        config_.run.rollout_devices > 0
            ? config_.run.rollout_devices
            : std::max<int64_t>(1, cells / 2) * cost_.devices_per_replica();
    const int rollout = static_cast<int>(rollout_devices / cost_.devices_per_replica());
    // The trainers are cells [0, cells - rollout); the rest generate.
    core_cells_ = cells - rollout;
    for (int c = 0; c < core_cells_; ++c) {
      cells_[c].state = CellState::kTrain;
      cells_[c].target = CellRole::kTrain;
    }
  } else if (mode == SimMode::kElastic) {
    // The elastic job always streams its steps (MicroStepQueue): micro-steps of
    // learner.token_budget tokens, or, without one, the batch's expected tokens over
    // learner.micro_steps.
    streaming_ = true;
    stream_budget_ =
        config_.learner.token_budget > 0
            ? static_cast<double>(config_.learner.token_budget)
            : std::max(1.0, config_.workload.episode.mean_tokens *
                                static_cast<double>(config_.run.batch_groups *
                                                    config_.run.group_size) /
                                static_cast<double>(config_.learner.micro_steps));
    core_cells_ = static_cast<int>(config_.scheduler.core_cells);
    for (int c = 0; c < core_cells_; ++c) {
      cells_[c].state = CellState::kTrain;
      cells_[c].target = CellRole::kTrain;
    }
    ASSIGN_OR_RETURN(controller_,
                     scheduler::MakeElasticController(
                         config_.JobSchedulerOptions(cells), cells - core_cells_,
                         static_cast<double>(cost_.episode_slots()), remaining_.Fresh()));
  }
  const int64_t episodes =
      config_.run.max_steps * config_.run.batch_groups * config_.run.group_size;
  episode_tokens_.reserve(static_cast<size_t>(std::min<int64_t>(episodes * 2, 1 << 24)));
  for (int c = 0; c < cells; ++c) {
    TimelineRole(c);
  }
  return absl::OkStatus();
}

bool Simulation::KeepTimelineLine() {
  if (!config_.run.timeline) return false;
  if (static_cast<int64_t>(timeline_.size()) < options_.max_timeline_lines) return true;
  ++timeline_dropped_;
  return false;
}

void Simulation::TimelineRole(int c) {
  if (!KeepTimelineLine()) return;
  timeline_.push_back(
      {{"t", now_}, {"event", "role"}, {"cell", c}, {"role", CellStateName(cells_[c].state)}});
}

void Simulation::TimelineStep() {
  if (!KeepTimelineLine()) return;
  timeline_.push_back({{"t", now_}, {"event", "step"}, {"step", steps_done_}});
}

// ---------------------------------------------------------------- roles

void Simulation::SetState(int c, CellState state) {
  Cell& cell = cells_[c];
  const bool was_switching =
      cell.state == CellState::kToTrain || cell.state == CellState::kToRollout;
  if (was_switching) cell.switching += now_ - cell.since;
  cell.state = state;
  if (state == CellState::kToTrain || state == CellState::kToRollout) cell.since = now_;
  TimelineRole(c);
}

void Simulation::RequestRole(int c, CellRole role) {
  cells_[c].target = role;
  StartSwitch(c);
  // A draining cell called back before it left takes episodes again.
  if (role == CellRole::kRollout && cells_[c].state == CellState::kRollout) FillCell(c);
}

// scheduler.drain_on_switch: a cell leaving rollout finishes its episodes in place first.
bool Simulation::Drains(int c) const {
  return config_.scheduler.drain_on_switch && config_.run.mode == SimMode::kElastic &&
         !cells_[c].episodes.empty();
}

// Starts the switch towards the cell's target when it is in a stable role that differs; a cell
// in a switch or a micro-step starts it when that ends.
void Simulation::StartSwitch(int c) {
  Cell& cell = cells_[c];
  if (cell.target == CellRole::kTrain && cell.state == CellState::kRollout) {
    if (Drains(c)) return;  // FinishEpisode comes back once the last one ended
    HandOver(c);
    SetState(c, CellState::kToTrain);
    ++switches_to_train_;
    Schedule(config_.run.mode == SimMode::kColocated ? cost_.SwitchToRolloutSeconds()
                                                     : cost_.SwitchToTrainSeconds(),
             EventKind::kSwitchDone, c);
  } else if (cell.target == CellRole::kRollout && cell.state == CellState::kTrain &&
             !cell.in_micro_step) {
    SetState(c, CellState::kToRollout);
    ++switches_to_rollout_;
    Schedule(cost_.SwitchToRolloutSeconds(), EventKind::kSwitchDone, c);
  }
}

void Simulation::OnSwitchDone(int c) {
  Cell& cell = cells_[c];
  if (cell.state == CellState::kToTrain) {
    SetState(c, CellState::kTrain);
    cell.version = version_;
    if (cell.target == CellRole::kRollout) return StartSwitch(c);
    ClaimMicroStep(c);
    TryStartStep();
    return;
  }
  SetState(c, CellState::kRollout);
  cell.version = version_;  // it trained the current weights (colocated: in place)
  if (cell.target == CellRole::kTrain) return StartSwitch(c);
  // Episodes parked while no cell had room resume here from their last environment boundary.
  PlaceParked();
  if (config_.run.mode != SimMode::kColocated) return FillCell(c);
  // Colocated: the batch is spread over all cells once they are all back.
  for (const Cell& other : cells_) {
    if (other.state != CellState::kRollout) return;
  }
  FillRolloutCells();
}

// The rollout cells that may take episodes (all but `leaving`), with their loads; `takers` gets
// their cell indices in the same order.
std::vector<scheduler::CellCapacity> Simulation::TakerCapacity(std::vector<int>& takers,
                                                               int leaving) const {
  std::vector<scheduler::CellCapacity> capacity;
  for (int c = 0; c < static_cast<int>(cells_.size()); ++c) {
    const Cell& cell = cells_[c];
    if (c == leaving || cell.state != CellState::kRollout || cell.target != CellRole::kRollout) {
      continue;
    }
    takers.push_back(c);
    capacity.push_back({.episodes = static_cast<int64_t>(cell.episodes.size()),
                        .slots = cost_.episode_slots(),
                        .kv_tokens = cell.kv_tokens,
                        .kv_budget = cost_.kv_budget_tokens()});
  }
  return capacity;
}

// A cell leaving rollout hands its episodes to the rollout cells with room for them, least
// loaded first (scheduler/hand_over.h), or parks them: those in an environment wait continue
// there; a generation in progress is cancelled and resumed from the last environment boundary,
// its tokens discarded (ARCHITECTURE.md "Elastic scheduling"). The taker prefills the whole
// context again.
void Simulation::HandOver(int c) {
  std::vector<int64_t> slots;
  slots.swap(cells_[c].episodes);
  cells_[c].kv_tokens = 0;
  std::vector<int> takers;
  std::vector<scheduler::CellCapacity> capacity = TakerCapacity(takers, c);
  std::vector<double> kv;
  for (int64_t slot : slots) kv.push_back(static_cast<double>(episodes_[slot].context));
  const std::vector<int> placed = scheduler::PlaceEpisodes(kv, capacity);
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t slot = slots[i];
    Episode& e = episodes_[slot];
    ++handovers_;
    if (e.generating) {
      CancelGeneration(e);
      ++e.epoch;  // its kGenerated event is now stale
    }
    e.cell = -1;
    e.full_prefill = true;  // the new cell holds none of its KV cache
    if (placed[i] < 0) {
      PauseBudget(e);
      parked_.push_back(slot);
      ++parked_total_;
    } else {
      Resume(slot, takers[placed[i]]);
    }
  }
}

void Simulation::PlaceParked() {
  if (parked_.empty()) return;
  std::vector<int> takers;
  std::vector<scheduler::CellCapacity> capacity = TakerCapacity(takers, -1);
  std::vector<double> kv;
  for (int64_t slot : parked_) kv.push_back(static_cast<double>(episodes_[slot].context));
  const std::vector<int> placed = scheduler::PlaceEpisodes(kv, capacity);
  std::vector<int64_t> still;
  for (size_t i = 0; i < parked_.size(); ++i) {
    if (placed[i] < 0) {
      still.push_back(parked_[i]);
    } else {
      Resume(parked_[i], takers[placed[i]]);
    }
  }
  parked_.swap(still);
}

// An episode handed over continues on `c`: its generation restarts now, or when its
// environment step returns.
void Simulation::Resume(int64_t slot, int c) {
  AssignToCell(slot, c);
  const double budget = config_.actor.episode_time_budget_s;
  Episode& e = episodes_[slot];
  if (budget > 0 && std::isinf(e.deadline)) ArmDeadline(slot, budget - e.budget_used);
  if (!e.in_env) BeginGeneration(slot);
}

void Simulation::ArmDeadline(int64_t slot, double budget_left) {
  Episode& e = episodes_[slot];
  e.budget_since = now_;
  e.deadline = now_ + std::max(0.0, budget_left);  // the time Schedule gives the event
  Schedule(budget_left, EventKind::kDeadline, e.cell, slot, e.index);
}

void Simulation::PauseBudget(Episode& e) {
  if (std::isinf(e.deadline)) return;
  e.budget_used += now_ - e.budget_since;
  e.deadline = INFINITY;  // its kDeadline event finds now_ < deadline and is ignored
}

// The budget ran out: the episode ends now, whatever it was doing. The turns it finished make its
// trajectory (a job scores them as partial progress); a generation in progress is lost.
void Simulation::OnDeadline(int64_t slot, int64_t index) {
  Episode& e = episodes_[slot];
  // Stale: the slot holds a later episode, or this one finished or was parked since.
  if (e.index != index || now_ < e.deadline) return;
  if (e.generating) CancelGeneration(e);
  e.in_env = false;
  ++e.epoch;  // its pending kGenerated or kEnvDone event is now stale
  e.timed_out = true;
  ++timed_out_;
  FinishEpisode(slot);
}

// ---------------------------------------------------------------- rollout

// Counted from the steps whose weights the rollout cells hold, as the elastic job counts the
// steps "done and published" (its publish is in-process; here it takes the transfer time).
int64_t Simulation::AdmissionRoom() const {
  if (steps_done_ >= config_.run.max_steps) return 0;
  if (pipeline_.enabled()) {
    // The async job's count: every episode handed out and not yet in a batch the learner took.
    return pipeline_.Room(handed_out_ - limiter_.samples() * config_.run.group_size);
  }
  return admission_.Room(steps_published_, handed_out_);
}

void Simulation::FillCell(int c) {
  Cell& cell = cells_[c];
  if (cell.state != CellState::kRollout || cell.target != CellRole::kRollout) return;
  while (static_cast<int64_t>(cell.episodes.size()) < cost_.episode_slots() &&
         AdmissionRoom() > 0) {
    StartEpisode(c);
  }
}

// Spreads new episodes over the rollout cells, least loaded first (level by level), as a
// router in front of several engines would.
void Simulation::FillRolloutCells() {
  const int64_t slots = cost_.episode_slots();
  int64_t level = slots;
  for (const Cell& cell : cells_) {
    if (cell.state == CellState::kRollout && cell.target == CellRole::kRollout) {
      level = std::min(level, static_cast<int64_t>(cell.episodes.size()));
    }
  }
  for (; level < slots && AdmissionRoom() > 0; ++level) {
    for (int c = 0; c < static_cast<int>(cells_.size()) && AdmissionRoom() > 0; ++c) {
      Cell& cell = cells_[c];
      if (cell.state == CellState::kRollout && cell.target == CellRole::kRollout &&
          static_cast<int64_t>(cell.episodes.size()) <= level) {
        StartEpisode(c);
      }
    }
  }
}

void Simulation::StartEpisode(int c) {
  int64_t slot;
  if (free_slots_.empty()) {
    slot = static_cast<int64_t>(episodes_.size());
    episodes_.emplace_back();
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  Episode& e = episodes_[slot];
  const uint32_t epoch = e.epoch + 1;  // events of the slot's previous episode stay stale
  e = Episode{};
  e.epoch = epoch;
  e.index = handed_out_++;
  e.shape = cost_.DrawEpisode(rng_, cost_.LengthScale(now_, steps_done_));
  ++cells_[c].dispatched;
  e.context = e.shape.prompt_tokens;
  e.full_prefill = true;
  AssignToCell(slot, c);
  const double budget = config_.actor.episode_time_budget_s;
  if (budget > 0) ArmDeadline(slot, budget);
  if (config_.workload.episode.reset_env_step) {
    e.in_env = e.resetting = true;  // the first turn waits for the prompt
    return Schedule(absl::ToDoubleSeconds(env_latency_->Sample()), EventKind::kEnvDone, c, slot,
                    e.epoch);
  }
  BeginGeneration(slot);
}

void Simulation::AssignToCell(int64_t slot, int c) {
  Episode& e = episodes_[slot];
  Cell& cell = cells_[c];
  e.cell = c;
  e.position = static_cast<int32_t>(cell.episodes.size());
  cell.episodes.push_back(slot);
  cell.kv_tokens += static_cast<double>(e.context);
  max_cell_episodes_ = std::max(max_cell_episodes_, static_cast<int64_t>(cell.episodes.size()));
  max_cell_kv_ = std::max(max_cell_kv_, cell.kv_tokens);
}

void Simulation::GrowContext(Episode& e, int64_t tokens) {
  e.context += tokens;
  if (e.cell < 0) return;
  Cell& cell = cells_[e.cell];
  cell.kv_tokens += static_cast<double>(tokens);
  max_cell_kv_ = std::max(max_cell_kv_, cell.kv_tokens);
}

void Simulation::RemoveFromCell(int64_t slot) {
  Episode& e = episodes_[slot];
  if (e.cell < 0) return;
  cells_[e.cell].kv_tokens -= static_cast<double>(e.context);
  std::vector<int64_t>& list = cells_[e.cell].episodes;
  const int64_t last = list.back();
  list[e.position] = last;
  episodes_[last].position = e.position;
  list.pop_back();
  e.cell = -1;
}

// One turn of generation on the episode's cell: prefill what is new in the context, then
// generated_per_turn decode steps whose cost is fixed at the start from the cell's batch then
// (continuous batching; the other sequences are taken to hold as much KV as this one).
void Simulation::BeginGeneration(int64_t slot) {
  Episode& e = episodes_[slot];
  Cell& cell = cells_[e.cell];
  if (cell.generating++ == 0) cell.since = now_;
  e.generating = true;
  // The weights of the cell now: tokens generated after a swap carry the newer version.
  e.generation_version = cell.version;
  const int64_t fresh = e.full_prefill ? e.context
                        : e.turn == 0  ? e.shape.prompt_tokens
                                       : e.shape.observation_per_turn;
  const int64_t past = e.context - fresh;  // already in this cell's KV cache
  e.full_prefill = false;
  const int64_t g = e.shape.generated_per_turn;
  const double mean_context = static_cast<double>(e.context) + static_cast<double>(g) / 2;
  const double step =
      cost_.DecodeStepSeconds(cell.generating, static_cast<double>(cell.generating) * mean_context);
  e.generation_start = now_;
  e.generation_seconds = cost_.PrefillSeconds(fresh, past) + static_cast<double>(g) * step;
  Schedule(e.generation_seconds, EventKind::kGenerated, e.cell, slot, e.epoch);
}

void Simulation::EndGeneration(Episode& e) {
  Cell& cell = cells_[e.cell];
  e.generating = false;
  if (--cell.generating == 0) cell.rollout_busy += now_ - cell.since;
}

// Stops a generation before its end; the tokens it had produced are counted as discarded.
void Simulation::CancelGeneration(Episode& e) {
  const double done = (now_ - e.generation_start) / std::max(1e-12, e.generation_seconds);
  tokens_discarded_ += done * static_cast<double>(e.shape.generated_per_turn);
  EndGeneration(e);
}

void Simulation::OnGenerated(int64_t slot, uint32_t epoch) {
  Episode& e = episodes_[slot];
  if (e.epoch != epoch || !e.generating) return;  // cancelled by a handover
  EndGeneration(e);
  tokens_generated_ += e.shape.generated_per_turn;
  e.min_version = e.min_version == kNoVersion ? e.generation_version
                                              : std::min(e.min_version, e.generation_version);
  e.max_version = std::max(e.max_version, e.generation_version);
  GrowContext(e, e.shape.generated_per_turn);
  ++e.turn;
  if (e.turn == e.shape.turns) {
    if (!config_.workload.episode.final_env_step) return FinishEpisode(slot);
    e.in_env = true;  // the environment scores the last turn
    return Schedule(absl::ToDoubleSeconds(env_latency_->Sample()), EventKind::kEnvDone, e.cell,
                    slot, e.epoch);
  }
  // A failure (a crashed sandbox, a lost tool server) strikes at a turn boundary with the
  // per-turn probability that makes the episode's failure probability failure_rate:
  // 1 − (1 − p)^turns = failure_rate. The episode starts again from its prompt.
  const double rate = config_.workload.episode.failure_rate;
  if (rate > 0) {
    const double p = 1 - std::pow(1 - rate, 1.0 / e.shape.turns);
    if (std::uniform_real_distribution<double>(0, 1)(rng_) < p) {
      ++failed_;
      tokens_discarded_ += static_cast<double>(e.context - e.shape.prompt_tokens);
      e.turn = 0;
      GrowContext(e, e.shape.prompt_tokens - e.context);
      e.min_version = e.max_version = kNoVersion;
      e.full_prefill = true;
      return BeginGeneration(slot);
    }
  }
  e.in_env = true;
  Schedule(absl::ToDoubleSeconds(env_latency_->Sample()), EventKind::kEnvDone, e.cell, slot,
           e.epoch);
}

void Simulation::OnEnvDone(int64_t slot, uint32_t epoch) {
  Episode& e = episodes_[slot];
  if (e.epoch != epoch) return;
  e.in_env = false;
  if (e.turn == e.shape.turns) return FinishEpisode(slot);  // the final step (final_env_step)
  if (e.resetting) {
    e.resetting = false;  // the prompt is there: the first turn starts
  } else {
    GrowContext(e, e.shape.observation_per_turn);
  }
  if (e.cell < 0) return;  // parked: generates when a cell has room
  BeginGeneration(slot);
}

void Simulation::FinishEpisode(int64_t slot) {
  Episode& e = episodes_[slot];
  const int c = e.cell;
  ++finished_;
  if (c >= 0) ++cells_[c].finished;
  remaining_.Observe(static_cast<int64_t>(e.turn) * e.shape.generated_per_turn);
  // What the buffer and the staleness filter read of a trajectory: its group, and the versions
  // of its generated tokens (the oldest and the newest stand for all of them).
  auto t = std::make_shared<Trajectory>();
  t->id = std::to_string(e.index);
  t->group_id = std::to_string(e.index / config_.run.group_size);
  t->versions = {e.min_version, e.max_version};
  const uint8_t generated = e.max_version != kNoVersion;  // no turn kept: nothing is stale
  t->trainable = {generated, generated};
  t->termination = e.timed_out ? Termination::kTimeout : Termination::kDone;
  if (static_cast<int64_t>(episode_tokens_.size()) <= e.index) {
    episode_tokens_.resize(static_cast<size_t>(e.index + 1), 0);
  }
  episode_tokens_[e.index] = e.context;
  RemoveFromCell(slot);
  ++e.epoch;
  e.deadline = INFINITY;  // a pending kDeadline event is now stale
  free_slots_.push_back(slot);

  ItemMember member;
  member.trajectory = std::move(t);
  GroupAssembler::Output out;
  assembler_.Add(std::move(member), Now(), &out);
  for (std::vector<ItemMember>& group : out.released) InsertGroup(std::move(group));
  if (c < 0) return;  // a parked episode's final step returned: no cell to fill
  if (cells_[c].target == CellRole::kTrain) return StartSwitch(c);  // draining: empty yet?
  PlaceParked();  // parked episodes before new ones
  FillCell(c);
}

void Simulation::InsertGroup(std::vector<ItemMember> members) {
  Group group;
  for (ItemMember& m : members) {
    int64_t index = 0;
    if (absl::SimpleAtoi(m.trajectory->id, &index)) group.tokens += episode_tokens_[index];
    group.members.push_back(std::move(m.trajectory));
  }
  blocked_.push_back(std::move(group));
  RetryBlockedInserts();
}

// Inserts in order while the rate limiter allows (a full table blocks the producers).
void Simulation::RetryBlockedInserts() {
  bool inserted = false;
  while (!blocked_.empty() && limiter_.CanInsert(static_cast<int64_t>(table_.size()))) {
    limiter_.Insert();
    table_.push_back(std::move(blocked_.front()));
    blocked_.pop_front();
    ++inserted_groups_;
    inserted = true;
  }
  if (!inserted) return;
  if (config_.run.mode == SimMode::kColocated) {
    ColocatedControl();
  } else {
    TryStartStep();
  }
}

// ---------------------------------------------------------------- training

bool Simulation::AllCellsTrain() const {
  for (const Cell& cell : cells_) {
    if (cell.state != CellState::kTrain) return false;
  }
  return true;
}

// Colocated: once the batch is in the buffer and nothing is left generating, every cell moves
// to training; after the step, every cell moves back (OnReduceDone).
void Simulation::ColocatedControl() {
  if (colocated_training_) return;
  const int64_t batch = config_.run.batch_groups;
  if (static_cast<int64_t>(table_.size()) < batch) return;
  for (const Cell& cell : cells_) {
    if (cell.state != CellState::kRollout || !cell.episodes.empty()) return;
  }
  colocated_training_ = true;
  for (int c = 0; c < static_cast<int>(cells_.size()); ++c) RequestRole(c, CellRole::kTrain);
}

// A group whose lag exceeds buffer.max_staleness when the learner picks it (Table::Sample: lag
// = learner version − the group's oldest token version).
bool Simulation::BufferStale(const Group& group) const {
  const int64_t bound = config_.buffer.max_staleness;
  if (bound < 0) return false;
  int64_t oldest = version_;
  for (const auto& t : group.members) {
    if (const int64_t v = t->MinVersion(); v != kNoVersion) oldest = std::min(oldest, v);
  }
  return version_ - oldest > bound;
}

// One sample of the table as a job's Table::Sample takes it: the oldest group, while the rate
// limiter allows; a group too stale for the buffer is dropped as it is picked and counts as a
// sample (Queue semantics), and the next is tried. nullopt: nothing can be taken now. `sampled`
// is set when anything left the table.
std::optional<Group> Simulation::SampleGroup(bool& sampled) {
  while (!table_.empty() && limiter_.CanSample(static_cast<int64_t>(table_.size()))) {
    limiter_.Sample();
    sampled = true;
    Group group = std::move(table_.front());
    table_.pop_front();
    if (!BufferStale(group)) return group;
    ++buffer_dropped_stale_;
    buffer_dropped_trajectories_ += static_cast<int64_t>(group.members.size());
  }
  return std::nullopt;
}

void Simulation::TryStartStep() {
  if (steps_done_ >= config_.run.max_steps) return;
  if (streaming_) return StreamGroups();
  if (step_running_) return;
  if (config_.run.mode == SimMode::kColocated && !AllCellsTrain()) return;
  const int64_t batch = config_.run.batch_groups;
  // While it waits, the learner takes groups as they arrive; the step starts once it holds its
  // batch.
  bool took = false;
  while (static_cast<int64_t>(collected_.size()) < batch) {
    std::optional<Group> group = SampleGroup(took);
    if (!group.has_value()) break;
    collected_.push_back(*std::move(group));
  }
  if (static_cast<int64_t>(collected_.size()) < batch) {
    if (took) RetryBlockedInserts();  // the table made room: a blocked insert goes in
    return;
  }
  OpenStep();
  for (const Group& group : collected_) AddToStep(group);
  collected_.clear();
  RetryBlockedInserts();
  step_closed_ = true;
  const int64_t n = MicroSteps(step_tokens_);
  pending_micro_.assign(n, static_cast<double>(step_tokens_) / n);
  step_micro_steps_ = n;
  ClaimWaiting();
}

// The elastic job's step (ElasticJob::Feed): groups are added as the table hands them out, and
// each token budget's worth becomes a micro-step at once, so training starts on the first
// groups; once the batch is in, the rest is one last micro-step.
void Simulation::StreamGroups() {
  if (!step_running_) OpenStep();
  if (step_closed_) return;
  const int64_t batch = config_.run.batch_groups;
  const double budget = stream_budget_;
  const size_t pending_before = pending_micro_.size();
  bool took = false;
  while (step_groups_ < batch) {
    std::optional<Group> group = SampleGroup(took);
    if (!group.has_value()) break;
    buffered_tokens_ += static_cast<double>(AddToStep(*group));
    ++step_groups_;
    for (; buffered_tokens_ >= budget; buffered_tokens_ -= budget) pending_micro_.push_back(budget);
  }
  if (took) RetryBlockedInserts();  // the table made room: a blocked insert goes in
  if (step_groups_ == batch) {
    step_closed_ = true;
    // The flush at Close; a step with nothing trainable still runs one (empty) micro-step.
    if (buffered_tokens_ > 0 ||
        static_cast<int64_t>(pending_micro_.size()) + micro_running_ + step_micro_steps_ == 0) {
      pending_micro_.push_back(buffered_tokens_);
    }
    buffered_tokens_ = 0;
  }
  step_micro_steps_ += static_cast<int64_t>(pending_micro_.size() - pending_before);
  if (pending_micro_.size() > pending_before) ClaimWaiting();
  MaybeReduce();
}

void Simulation::OpenStep() {
  step_running_ = true;
  step_closed_ = reducing_ = false;
  step_groups_ = step_micro_steps_ = micro_running_ = 0;
  buffered_tokens_ = 0;
  pending_micro_.clear();
  step_trajectories_ = step_dropped_ = step_tokens_ = step_timed_out_ = 0;
  step_lag_counts_.clear();
  core_busy_step_ = 0;
  participants_ = 0;
  std::fill(participated_.begin(), participated_.end(), false);
}

// The learner's staleness filter, applied as the learner applies it, on the group's
// trajectories (each a group id, an id and the versions of its tokens: a few bytes to copy).
// Returns the tokens it kept.
int64_t Simulation::AddToStep(const Group& group) {
  std::vector<Trajectory> trajectories;
  trajectories.reserve(group.members.size());
  for (const auto& t : group.members) trajectories.push_back(*t);
  for (const Trajectory& t : trajectories) {
    step_timed_out_ += t.termination == Termination::kTimeout;
  }
  const StalenessReport report = staleness_.Apply(version_, trajectories);
  for (const auto& [lag, count] : report.lag_counts) {
    step_lag_counts_[lag] += count;
    lag_counts_[lag] += count;
    for (int64_t n = 0; n < count; ++n) lag_histogram_.Observe(static_cast<double>(lag));
  }
  step_trajectories_ += report.kept + report.dropped;
  step_dropped_ += report.dropped;
  int64_t kept_tokens = 0;
  for (const Trajectory& t : trajectories) {  // the kept ones
    int64_t index = 0;
    if (absl::SimpleAtoi(t.id, &index)) kept_tokens += episode_tokens_[index];
  }
  step_tokens_ += kept_tokens;
  dropped_stale_tokens_ += group.tokens - kept_tokens;
  return kept_tokens;
}

// The cells waiting to train claim as the step's queue hands out micro-steps: the core cells
// first (MicroStepQueue::Claim), then the satellites in a random order (they block on the
// queue and wake together). A stream of its own, so that the episodes' draws stay as they were.
void Simulation::ClaimWaiting() {
  std::vector<int> order(cells_.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin() + core_cells_, order.end(), claim_rng_);
  for (int c : order) ClaimMicroStep(c);
}

// Every micro-step of a closed step is done: its participants reduce.
void Simulation::MaybeReduce() {
  if (!step_running_ || !step_closed_ || reducing_ || !pending_micro_.empty() ||
      micro_running_ > 0) {
    return;
  }
  reducing_ = true;
  Schedule(cost_.AllReduceSeconds(participants_) + cost_.StepOverheadSeconds(),
           EventKind::kReduceDone, 0);
}

// learner.token_budget > 0: as a job packs a step. Its data-parallel ranks (colocated: every
// cell; async: the training cells) each pack their share of the batch into micro-batches of at
// most token_budget tokens, so every rank has one at least; the elastic job's step queue packs
// the whole batch for whoever claims.
int64_t Simulation::MicroSteps(int64_t tokens) const {
  const int64_t budget = config_.learner.token_budget;
  if (budget <= 0) return config_.learner.micro_steps;
  const SimMode mode = config_.run.mode;
  const int64_t ranks = mode == SimMode::kColocated ? static_cast<int64_t>(cells_.size())
                        : mode == SimMode::kAsync   ? core_cells_
                                                    : 1;
  const int64_t share = (tokens + ranks - 1) / ranks;
  return ranks * std::max<int64_t>(1, (share + budget - 1) / budget);
}

void Simulation::ClaimMicroStep(int c) {
  Cell& cell = cells_[c];
  if (!step_running_ || pending_micro_.empty() || cell.in_micro_step ||
      cell.state != CellState::kTrain || cell.target != CellRole::kTrain) {
    return;
  }
  const double tokens = pending_micro_.front();
  pending_micro_.pop_front();
  ++micro_running_;
  cell.in_micro_step = true;
  cell.micro_tokens = tokens;
  cell.since = now_;
  if (!participated_[c]) {
    participated_[c] = true;
    ++participants_;
  }
  Schedule(cost_.TrainSeconds(tokens), EventKind::kMicroStepDone, c);
}

void Simulation::OnMicroStepDone(int c) {
  Cell& cell = cells_[c];
  cell.in_micro_step = false;
  cell.train_busy += now_ - cell.since;
  micro_seconds_ += now_ - cell.since;
  micro_tokens_ += cell.micro_tokens;
  if (c == 0) core_busy_step_ += now_ - cell.since;
  --micro_running_;
  if (cell.target == CellRole::kRollout) {
    StartSwitch(c);  // a satellite told to leave stops claiming
  } else {
    ClaimMicroStep(c);
  }
  MaybeReduce();
}

void Simulation::OnReduceDone() {
  // The optimiser update ends the step on every cell still training (its compute, like a
  // job's learner_busy_s).
  const double overhead = cost_.StepOverheadSeconds();
  for (int c = 0; c < static_cast<int>(cells_.size()); ++c) {
    if (participated_[c] && cells_[c].state == CellState::kTrain) {
      cells_[c].train_busy += overhead;
      if (c == 0) core_busy_step_ += overhead;
    }
  }
  ++version_;
  ++steps_done_;
  step_running_ = false;
  trained_trajectories_ += step_trajectories_ - step_dropped_;
  trained_tokens_ += step_tokens_;
  dropped_stale_ += step_dropped_;
  micro_steps_per_step_ = scheduler::AverageMicroSteps(micro_steps_per_step_, step_micro_steps_);
  for (Cell& cell : cells_) {
    if (cell.state == CellState::kTrain) cell.version = version_;
  }
  const Usage usage = UsageNow();
  int training = 0, rolling = 0;
  for (int c = 0; c < static_cast<int>(cells_.size()); ++c) {
    training += cells_[c].state == CellState::kTrain && IsSatellite(c);
    rolling += cells_[c].state == CellState::kRollout;
  }
  const double window = now_ - last_step_time_;
  metrics_.push_back({
      {"step", steps_done_},
      {"version", version_},
      {"elapsed_s", now_},
      {"trajectories", step_trajectories_},
      {"dropped", {{"learner_stale", step_dropped_}, {"buffer_stale", buffer_dropped_stale_}}},
      {"timed_out", step_timed_out_},
      {"tokens", step_tokens_},
      {"lag_mean", SummariseLags(step_lag_counts_).mean},
      {"lag_counts", LagCountsJson(step_lag_counts_)},
      {"learner_busy_s", core_busy_step_},
      {"learner_wait_s", std::max(0.0, window - core_busy_step_)},
      {"participants", participants_},
      {"micro_steps", step_micro_steps_},
      {"satellites_training", training},
      {"rollout_cells", rolling},
      {"episodes_in_flight", handed_out_ - finished_},
      {"trained_samples_per_s", now_ > 0 ? trained_trajectories_ / now_ : 0.0},
      {"utilisation", UsageJson(usage, last_usage_, window)},
  });
  last_usage_ = usage;
  last_step_time_ = now_;
  if (time_to_half_ < 0 && 2 * steps_done_ >= config_.run.max_steps) time_to_half_ = now_;
  TimelineStep();
  if (steps_done_ >= config_.run.max_steps) return;
  Publish();
  if (config_.run.mode == SimMode::kColocated) {
    colocated_training_ = false;
    for (int c = 0; c < static_cast<int>(cells_.size()); ++c) RequestRole(c, CellRole::kRollout);
    return;
  }
  TryStartStep();
}

// Every cell that generates receives the new weights after the transfer time; generation goes
// on meanwhile (the swap happens between decode steps).
void Simulation::Publish() {
  if (config_.run.mode == SimMode::kColocated) {  // the weights are updated in place
    steps_published_ = steps_done_;
    return;
  }
  const double transfer = cost_.WeightTransferSeconds();
  for (int c = 0; c < static_cast<int>(cells_.size()); ++c) {
    if (cells_[c].state == CellState::kRollout || cells_[c].state == CellState::kToRollout) {
      Schedule(transfer, EventKind::kWeightsArrive, c, 0, version_);
    }
  }
  Schedule(transfer, EventKind::kPublished, 0, 0, steps_done_);
}

void Simulation::OnPublished(int64_t steps) {
  steps_published_ = std::max(steps_published_, steps);
  FillRolloutCells();
}

// Finished work not trained yet: groups in the table, held back by the rate limiter or collected
// for the next step, and the running step's tokens not in a micro-step yet or not claimed.
double Simulation::BacklogTokens() const {
  double tokens = buffered_tokens_;
  for (double t : pending_micro_) tokens += t;
  for (const std::deque<Group>* groups : {&table_, &blocked_}) {
    for (const Group& g : *groups) tokens += static_cast<double>(g.tokens);
  }
  for (const Group& g : collected_) tokens += static_cast<double>(g.tokens);
  return tokens;
}

double Simulation::MeanTrainedTokens() const {
  return trained_trajectories_ > 0
             ? static_cast<double>(trained_tokens_) / static_cast<double>(trained_trajectories_)
             : 0;
}

// What the elastic job's control plane observes (scheduler/elastic_control.h, ObserveCells): each
// satellite's report, admission's room, the backlog and the training cost measured so far.
scheduler::SchedulerObservation Simulation::Observe() {
  const bool tokens = controller_->unit() == scheduler::WorkUnit::kTokens;
  std::vector<scheduler::SatelliteReport> reports;
  std::vector<int64_t> generated;
  for (int c = core_cells_; c < static_cast<int>(cells_.size()); ++c) {
    const Cell& cell = cells_[c];
    scheduler::SatelliteReport r{
        .rolling_out = cell.state == CellState::kRollout && cell.target == CellRole::kRollout,
        .dispatched = cell.dispatched,
        .finished = cell.finished,
        .held = static_cast<int64_t>(cell.episodes.size()),
        .slots = cost_.episode_slots()};
    if (tokens) {
      generated.clear();
      for (int64_t slot : cell.episodes) {
        const Episode& e = episodes_[slot];
        generated.push_back(static_cast<int64_t>(e.turn) * e.shape.generated_per_turn);
      }
      r.remaining_tokens = remaining_.Remaining(generated);
    }
    reports.push_back(r);
  }
  // The training side in tokens, or in episodes of the mean trained length.
  const double per_token = micro_tokens_ > 0 ? micro_seconds_ / micro_tokens_ : 0;
  const double per_episode = MeanTrainedTokens();
  const double batch_episodes =
      static_cast<double>(config_.run.batch_groups * config_.run.group_size);
  scheduler::TrainingReport training{.backlog = BacklogTokens(),
                                     .train_seconds_per_unit = per_token,
                                     .batch = batch_episodes * per_episode,
                                     .micro_steps = micro_steps_per_step_};
  if (!tokens) {
    training.backlog = per_episode > 0 ? training.backlog / per_episode : 0;
    training.train_seconds_per_unit = per_token * per_episode;
    training.batch = batch_episodes;
  }
  double parked_tokens = 0;
  if (tokens) {
    generated.clear();
    for (int64_t slot : parked_) {
      const Episode& e = episodes_[slot];
      generated.push_back(static_cast<int64_t>(e.turn) * e.shape.generated_per_turn);
    }
    parked_tokens = remaining_.Remaining(generated);
  }
  scheduler::SchedulerObservation o =
      scheduler::ObserveCells(Now(), steps_published_, AdmissionRoom(), reports, training,
                              static_cast<int64_t>(parked_.size()), parked_tokens);
  if (tokens) {
    o.capacity_per_cell = static_cast<double>(cost_.episode_slots()) * remaining_.Fresh();
  }
  return o;
}

// The elastic job's controller tick, on the simulator's counters.
absl::Status Simulation::OnTick() {
  ASSIGN_OR_RETURN(SchedulerDecision decision, controller_->Decide(Observe()));
  if (decision.move != SchedulerDecision::Move::kNone) {
    RequestRole(
        SatelliteCell(decision.satellite),
        decision.move == SchedulerDecision::Move::kToTrain ? CellRole::kTrain : CellRole::kRollout);
  }
  if (decision.changed || config_.scheduler.log_every_decision) {
    decisions_.push_back(std::move(decision));
  }
  Schedule(config_.scheduler.tick_seconds, EventKind::kTick, 0);
  return absl::OkStatus();
}

// ---------------------------------------------------------------- run

absl::StatusOr<SimResult> Simulation::Run() {
  const auto real_start = std::chrono::steady_clock::now();
  if (config_.run.mode == SimMode::kElastic) Schedule(0, EventKind::kTick, 0);
  FillRolloutCells();
  const double horizon =
      config_.run.max_sim_hours > 0 ? config_.run.max_sim_hours * 3600 : INFINITY;
  std::string_view stopped_by = "max_steps";
  while (steps_done_ < config_.run.max_steps) {
    if (events_.empty() || now_ - last_step_time_ > kStallSeconds) {
      return absl::InternalError(StrCat("simulation stalled at t=", now_, " s, step ", steps_done_,
                                        ": no learner step can complete (", handed_out_,
                                        " episodes handed out, ", finished_, " finished, ",
                                        table_.size(), " groups in the buffer, ",
                                        assembler_.pending_members(), " waiting for their group)"));
    }
    const Event event = events_.top();
    if (event.time > horizon) {
      stopped_by = "max_sim_hours";
      break;
    }
    events_.pop();
    clock_->Advance(absl::Seconds(event.time - now_));
    now_ = event.time;
    ++events_done_;
    switch (event.kind) {
      case EventKind::kGenerated:
        OnGenerated(event.id, static_cast<uint32_t>(event.tag));
        break;
      case EventKind::kEnvDone:
        OnEnvDone(event.id, static_cast<uint32_t>(event.tag));
        break;
      case EventKind::kMicroStepDone:
        OnMicroStepDone(event.cell);
        break;
      case EventKind::kReduceDone:
        OnReduceDone();
        break;
      case EventKind::kWeightsArrive:
        cells_[event.cell].version = std::max(cells_[event.cell].version, event.tag);
        break;
      case EventKind::kPublished:
        OnPublished(event.tag);
        break;
      case EventKind::kSwitchDone:
        OnSwitchDone(event.cell);
        break;
      case EventKind::kTick:
        RETURN_IF_ERROR(OnTick());
        break;
      case EventKind::kDeadline:
        OnDeadline(event.id, event.tag);
        break;
    }
  }
  if (stopped_by == "max_sim_hours") now_ = horizon;
  const double real_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - real_start).count();
  SimResult result;
  result.summary = Summary(stopped_by, real_seconds);
  result.metrics = std::move(metrics_);
  result.timeline = std::move(timeline_);
  result.decisions = std::move(decisions_);
  result.events = events_done_;
  result.sim_seconds = now_;
  result.real_seconds = real_seconds;
  return result;
}

// ---------------------------------------------------------------- outputs

Simulation::Usage Simulation::UsageNow() const {
  Usage u;
  for (const Cell& cell : cells_) {
    u.rollout += cell.rollout_busy + (cell.generating > 0 ? now_ - cell.since : 0);
    u.train += cell.train_busy + (cell.in_micro_step ? now_ - cell.since : 0);
    const bool switching = cell.state == CellState::kToTrain || cell.state == CellState::kToRollout;
    u.switching += cell.switching + (switching ? now_ - cell.since : 0);
  }
  return u;
}

// Shares of the device time in the window spent generating, training, switching and idle.
nlohmann::json Simulation::UsageJson(const Usage& now, const Usage& before, double seconds) const {
  const double total = std::max(1e-12, seconds * static_cast<double>(cells_.size()));
  const double rollout = (now.rollout - before.rollout) / total;
  const double train = (now.train - before.train) / total;
  const double switching = (now.switching - before.switching) / total;
  return {{"rollout", rollout},
          {"train", train},
          {"switching", switching},
          {"idle", std::max(0.0, 1 - rollout - train - switching)}};
}

nlohmann::json Simulation::Summary(std::string_view stopped_by, double real_seconds) const {
  const Usage usage = UsageNow();
  const double wall = std::max(1e-12, now_);
  // The learner's utilisation as a real run reports it: the training cells that always train
  // (colocated: every cell), busy over the wall time.
  double learner_busy = 0;
  const int learners =
      config_.run.mode == SimMode::kColocated ? static_cast<int>(cells_.size()) : core_cells_;
  for (int c = 0; c < learners; ++c) learner_busy += cells_[c].train_busy;
  const double device_seconds = wall * static_cast<double>(cost_.cluster().devices);
  nlohmann::json summary = {
      {"mode", SimModeName(config_.run.mode)},
      {"simulated", true},
      {"steps", steps_done_},
      {"final_step", steps_done_},
      {"version", version_},
      {"wall_seconds", now_},
      {"time_to_steps",
       {{"steps", steps_done_}, {"seconds", now_}, {"half_seconds", time_to_half_}}},
      {"episodes_dispatched", handed_out_},
      {"episodes_inserted", finished_},
      {"episodes_failed", failed_},
      {"episodes_timed_out", timed_out_},
      {"episodes_handed_over", handovers_},
      {"tokens_generated", tokens_generated_},
      {"tokens_discarded", std::llround(tokens_discarded_)},
      {"trajectories_trained", trained_trajectories_},
      {"tokens_trained", trained_tokens_},
      // Work done and thrown away: generations cut by a hand-over, a budget or a failure, and
      // trajectories (and their tokens) dropped as too stale at the step or by the buffer.
      {"dropped_work",
       {{"tokens_discarded", std::llround(tokens_discarded_)},
        {"stale_trajectories", dropped_stale_ + buffer_dropped_trajectories_},
        {"stale_tokens", dropped_stale_tokens_}}},
      {"trained_samples_per_s", trained_trajectories_ / wall},
      {"trained_tokens_per_s", trained_tokens_ / wall},
      {"learner_utilization", learner_busy / (wall * std::max(1, learners))},
      {"utilisation", UsageJson(usage, Usage{}, wall)},
      {"staleness",
       {{"lag_counts", LagCountsJson(lag_counts_)}, {"histogram", lag_histogram_.ToJson()}}},
      {"groups",
       {{"inserted", inserted_groups_},
        {"sampled", limiter_.samples()},
        {"left_in_buffer", table_.size()},
        {"dropped_stale", dropped_stale_},
        {"buffer_dropped_stale", buffer_dropped_stale_},
        {"buffer_dropped_trajectories", buffer_dropped_trajectories_}}},
      {"cost",
       {{"devices", cost_.cluster().devices},
        {"device_hours", device_seconds / 3600},
        {"usd", cost_.CostUsd(device_seconds)},
        {"usd_per_1k_trained_samples",
         trained_trajectories_ ? cost_.CostUsd(device_seconds) * 1000 / trained_trajectories_
                               : 0.0}}},
      {"cells",
       {{"replicas", cells_.size()},
        {"devices_per_replica", cost_.devices_per_replica()},
        {"episode_slots", cost_.episode_slots()},
        {"core_or_train_cells", core_cells_},
        {"switches_to_train", switches_to_train_},
        {"switches_to_rollout", switches_to_rollout_},
        {"switches_per_step",
         static_cast<double>(switches_to_train_ + switches_to_rollout_) /
             static_cast<double>(std::max<int64_t>(1, steps_done_))},
        {"controller", controller_ != nullptr ? config_.scheduler.controller : ""},
        {"episodes_parked", parked_total_},
        {"max_cell_episodes", max_cell_episodes_},
        {"max_cell_kv_tokens", max_cell_kv_},
        {"kv_budget_tokens", cost_.kv_budget_tokens()},
        {"to_train_seconds", cost_.SwitchToTrainSeconds()},
        {"to_rollout_seconds", cost_.SwitchToRolloutSeconds()},
        {"weight_transfer_seconds", cost_.WeightTransferSeconds()}}},
      {"events", events_done_},
      {"events_per_s", real_seconds > 0 ? events_done_ / real_seconds : 0.0},
      {"real_seconds", real_seconds},
      {"timeline_lines_dropped", timeline_dropped_},
      {"stopped_by", std::string(stopped_by)},
  };
  return summary;
}

}  // namespace

absl::StatusOr<SimResult> Simulate(const SimConfig& config, const SimulateOptions& options) {
  RETURN_IF_ERROR(config.Validate());
  VirtualClock clock;
  ASSIGN_OR_RETURN(CostModel cost, CostModel::Create(config.cluster, config.workload, &clock));
  Simulation simulation(config, options, std::move(cost), &clock);
  RETURN_IF_ERROR(simulation.Init());
  return simulation.Run();
}

absl::Status WriteSimRun(const SimConfig& config, const SimResult& result,
                         const std::filesystem::path& dir) {
  ASSIGN_OR_RETURN(std::unique_ptr<RunDirectory> run,
                   RunDirectory::Open(dir.parent_path().empty() ? "." : dir.parent_path(),
                                      dir.filename().string(), FormatSimConfig(config),
                                      /*resume=*/false));
  for (const nlohmann::json& line : result.metrics) RETURN_IF_ERROR(run->AppendMetrics(line));
  if (config.run.mode == SimMode::kElastic) {
    ASSIGN_OR_RETURN(std::unique_ptr<scheduler::SchedulerLog> log,
                     scheduler::SchedulerLog::Open(run->path() / "scheduler.jsonl"));
    for (const SchedulerDecision& d : result.decisions) RETURN_IF_ERROR(log->Append(d));
  }
  if (config.run.timeline) {
    std::ofstream timeline(run->path() / "timeline.jsonl");
    for (const nlohmann::json& line : result.timeline) timeline << line.dump() << "\n";
    timeline.flush();
    if (!timeline) {
      return absl::InternalError(
          StrCat("cannot write ", (run->path() / "timeline.jsonl").string()));
    }
  }
  return run->WriteSummary(result.summary);
}

}  // namespace flywheel::sim
