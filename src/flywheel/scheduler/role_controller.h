// What every elastic controller shares: the observation a controller decides on, the decision
// it returns (one move at most, with the sentence that explains it), and the interface the jobs
// and the simulator call. Two controllers implement it:
//
//   BacklogController  (backlog_controller.h, the default, scheduler.controller = "backlog")
//                      releases a satellite when trainable work piles up and the episodes in
//                      flight fit on one rollout cell fewer, recalls one when rollout is short
//                      and the trainers are about to run dry;
//   WaterLevelPolicy   (water_level.h, "water_level") QwenGyre's water-level rule as first built:
//                      releases as the batch drains, recalls whenever admission has room.
//
// Controllers are pure: observations in, one decision out; no threads, no clock of their own.
// Thread-safety: none; the loop that owns a controller serialises its calls.
#ifndef FLYWHEEL_SCHEDULER_ROLE_CONTROLLER_H_
#define FLYWHEEL_SCHEDULER_ROLE_CONTROLLER_H_

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace flywheel::scheduler {

// What w and capacity_per_cell count.
enum class WorkUnit { kEpisodes, kTokens };
std::string_view WorkUnitName(WorkUnit unit);  // "episodes", "tokens"
absl::StatusOr<WorkUnit> ParseWorkUnit(std::string_view name);

enum class CellRole { kRollout, kTrain };
std::string_view CellRoleName(CellRole role);  // "rollout", "train"

// What the scheduler loop sees at one decision. The water-level rule reads the rollout side
// (dispatched, finished, remaining_tokens, new_batch_demanded); the backlog controller
// (backlog_controller.h) reads the training side as well.
struct SchedulerObservation {
  absl::Time now;
  // Rollouts of the batch being generated handed out (queued or running) and finished; the
  // difference is the in-flight work in episodes.
  int64_t dispatched = 0;
  int64_t finished = 0;
  // Estimate of the tokens still to generate for those rollouts.
  double remaining_tokens = 0;
  // A new batch of rollouts is wanted and rollout capacity should grow back. A level, not an
  // edge: keep it set until the batch is dispatched.
  bool new_batch_demanded = false;
  // The learner step, for the log only.
  int64_t step = 0;
  // When > 0, one rollout cell's capacity for this decision, in `unit`, instead of
  // WaterLevelOptions::capacity_per_cell: the token unit's capacity is an estimate that moves
  // as episodes finish (remaining_tokens.h).
  double capacity_per_cell = 0;
  // Episodes admission would let start now (ElasticAdmission::Room, clamped at 0), and episode
  // slots still free on the satellites rolling out. More room than free slots: rollout is short
  // (a cell may keep a few slots free that a whole group does not fit in).
  int64_t admission_room = 0;
  int64_t free_slots = 0;
  // Finished work not trained yet (in the buffer, or in the running step's micro-steps not yet
  // run), in the controller's unit; and what one training cell takes to train one unit, in
  // seconds (measured by the caller; 0: not known yet).
  double backlog = 0;
  double train_seconds_per_unit = 0;
  // One learner step's batch in the controller's unit (batch_groups x group_size episodes, or
  // their expected tokens); 0: not known.
  double batch = 0;
  // The micro-steps a learner step is packed into, averaged over recent steps (0: not known).
  // The trainers divide them: m trainers run M micro-steps in ceil(M / m) rounds, so a trainer
  // more shortens a step only when it takes a round off.
  double micro_steps = 0;
  // Episodes each satellite holds now, by satellite (empty: not known). A satellite released
  // to training hands these over, so the controller releases the one holding the fewest.
  std::vector<int64_t> held;
  // Whether each satellite slot holds a live cell (empty: all do). A free slot (its cell died
  // or left) keeps its role for the next cell placed there, but generates and trains nothing:
  // counted as rolling out, it would hide that nobody generates.
  std::vector<bool> alive;

  int64_t in_flight() const { return dispatched - finished; }
  bool live(int satellite) const { return alive.empty() || alive[satellite]; }
};

struct SchedulerDecision {
  enum class Move { kNone, kToTrain, kToRollout };
  // Why the decision came out as it did, for logs and tests.
  enum class Cause {
    kFits,             // moved to train: work fits on one rollout cell fewer
    kAboveThreshold,   // no move: work does not fit on one cell fewer
    kMinRolloutCells,  // work remains and rollout cells are at (no move) or below (one
                       // comes back) min_rollout_cells
    kAllTraining,      // no move: no rollout satellite left to release
    kNewBatch,         // moved to rollout: a new batch is demanded
    kAllRollingOut,    // no move: a new batch is demanded, every satellite already rolls out
    kResidence,        // no move: the candidate satellite switched too recently
    // The backlog controller (backlog_controller.h):
    kBacklog,       // moved to train: the backlog exceeds release_backlog_batches and the work
                    // fits on one rollout cell fewer
    kRolloutShort,  // moved to rollout: rollout has been short and the backlog is small
    kBalanced,      // no move: neither the release nor the recall condition holds
    kNoSpeedup,     // no move: one more trainer would not take a round of micro-steps off a step
    kIdleTrainer,   // moved to rollout: one trainer fewer runs a step in as many rounds
  };

  Move move = Move::kNone;
  Cause cause = Cause::kAboveThreshold;
  // The satellite that moves, or that would have moved (kResidence); -1 when there is none.
  int satellite = -1;
  // One sentence naming the inputs, e.g. "w=3 episodes <= 5.4 = 2 rollout cells x 3 x (1 -
  // 0.1): satellite 2 to train".
  std::string reason;
  // True when this decision moves a cell or its cause differs from the previous decision's: the
  // decisions worth a log line.
  bool changed = false;

  // The inputs and the rule's figures, copied so a log line stands alone.
  SchedulerObservation observation;
  WorkUnit unit = WorkUnit::kEpisodes;
  double work = 0;       // w in `unit`
  double threshold = 0;  // (R-1) * c * (1 - hysteresis) with R before the decision
  // The backlog controller's: the learner step's duration, the averaged backlog in batches and
  // in seconds of training for the cells training now, and the share of the recent time rollout
  // was short.
  double step_seconds = 0;
  double backlog_batches = 0;
  double backlog_seconds = 0;
  double short_share = 0;
  int rollout_cells_before = 0;
  int rollout_cells_after = 0;

  // One JSON object for metrics.jsonl / scheduler.jsonl; see docs/elastic.md for the fields.
  nlohmann::json ToJson() const;
};
std::string_view MoveName(SchedulerDecision::Move move);     // "none", "to_train", "to_rollout"
std::string_view CauseName(SchedulerDecision::Cause cause);  // "fits", "backlog", ...
// By name, so that a failing test prints "to_train" rather than bytes.
std::ostream& operator<<(std::ostream& os, SchedulerDecision::Move move);
std::ostream& operator<<(std::ostream& os, SchedulerDecision::Cause cause);

// A controller of the satellites' roles. All satellites start in rollout.
class RoleController {
 public:
  virtual ~RoleController() = default;

  // Decides at most one move and applies it to the role table. Fails with kInvalidArgument on
  // an impossible observation; the role table is then unchanged.
  virtual absl::StatusOr<SchedulerDecision> Decide(const SchedulerObservation& observation) = 0;

  virtual CellRole role(int satellite) const = 0;  // satellite in [0, satellites)
  virtual int satellites() const = 0;
  virtual int rollout_cells() const = 0;
  virtual WorkUnit unit() const = 0;
  virtual std::string DebugString() const = 0;
};

}  // namespace flywheel::scheduler

#endif  // FLYWHEEL_SCHEDULER_ROLE_CONTROLLER_H_
