// The elastic scheduler's default controller (ARCHITECTURE.md "Elastic scheduling"): it moves a
// satellite between rollout and training only when the work on one side plainly outgrows the
// other, so that on a steady load the split settles where production meets consumption and
// stays there, and when the load moves the split follows it.
//
// With R satellites rolling out, w the work in flight (episodes, or the tokens still to
// generate), c one rollout cell's capacity:
//
//   backlog    = finished work not trained yet / one batch's work
//                the queue between rollout and training, in batches: near empty the trainers
//                run dry; near the admission window (η + 1 batches) rollout waits for them
//   short      = admission_room > free_slots
//                admission would start more episodes than the rollout cells have slots for
//
//   rounds(m)  = ⌈M / m⌉ with M the micro-steps of a step      the step's length on m trainers:
//                (averaged, rounded)                             each runs whole micro-steps
//
//   release    backlog > release_backlog_batches                 the trainers cannot keep up,
//   (to train) and rounds(T') < rounds(T) for a T' in (T, Tmax]  more would shorten the step,
//              and w <= (R − 1) · c · (1 − hysteresis)            and the episodes fit on R − 1
//              the rollout satellite holding the fewest episodes leaves (the fewest to hand over)
//
//   recall     rounds(T − 1) = rounds(T), no T' in (T, Tmax]     a trainer shortens nothing
//   (to roll.) with rounds(T') < rounds(T), work to generate     and leads nowhere that would
//              or: short most of the recent time                 rollout is the bottleneck,
//              and backlog < recall_backlog_batches               and the trainers run dry
//              the satellite that has trained longest comes back
//
// with T the training cells (core cells and training satellites) and Tmax = core cells +
// satellites − min_rollout_cells. Rounds matter where a step has few micro-steps for its
// trainers: 4 micro-steps take 2 rounds on 2 trainers and on 3, so a third trainer costs a
// rollout cell and gains nothing, while the backlog, which grows whenever the trainers are the
// bottleneck, would keep asking for it. A count that shortens nothing itself may lead to one that
// does (16 micro-steps: 4 rounds on 4 and 5 trainers, 3 on 6), so releases look ahead and such a
// trainer is not called back. One whole count decides both ways, so a release and a recall
// never both hold: the average rounded, kept until the average moves three quarters of a
// micro-step away (an average wavering around 4.5 moves nothing). Without a count (before the
// first step) only the backlog decides.
//
// In batches, the thresholds hold for a model whose steps take a fifth of a second on a CPU and
// one whose steps take minutes on a cluster, and they do not depend on the split: a backlog in
// seconds of the trainers' time, compared with the step's duration, would look small exactly
// when too few trainers make the steps long.
//
// Averages. The backlog and "short" are averaged over smoothing_steps learner steps (an
// exponential moving average in time; the step's duration measured from the observations' step
// count, before the first one what the trainers would take for a batch) before they are
// compared: within a step the backlog rises as its batch arrives and falls as it trains, and
// admission reopens at every publish; none of that is a reason to move. Two moves are at least
// move_interval_steps apart: a move shows in the averages only after a while, and moving again
// before would overshoot.
//
// Why not the water-level rule's signals: with a staleness bound η ≥ 1 its "new batch demanded"
// (admission has room) reopens at every published step and its release fires whenever a batch
// drains, so satellites go back and forth about fifteen times a step. The backlog is what a
// trainer lacks or has too much of; release_backlog_batches > recall_backlog_batches is a dead
// band in which nothing moves.
//
// Floors and residence as in the water-level rule: while w > 0 at least min_rollout_cells
// satellites roll out (one comes back when fewer do), one comes back when none rolls out and
// admission has room (the step being filled needs rollouts), and a satellite keeps a role at least
// min_residence after a switch (a candidate held back by it blocks the move). One move per
// decision. All satellites start in rollout.
//
// Thread-safety: none; the loop that owns it serialises its calls.
#ifndef FLYWHEEL_SCHEDULER_BACKLOG_CONTROLLER_H_
#define FLYWHEEL_SCHEDULER_BACKLOG_CONTROLLER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/scheduler/role_controller.h"

namespace flywheel::scheduler {

struct BacklogControllerOptions {
  int satellites = 1;  // ids 0..satellites-1, all start in rollout
  int core_cells = 1;  // cells that always train (they clear the backlog too)
  // Work one rollout cell holds, in `unit` (an observation's capacity_per_cell overrides it).
  double capacity_per_cell = 1;
  WorkUnit unit = WorkUnit::kEpisodes;
  // Share of one cell fewer's capacity the work in flight must leave free before a release.
  double hysteresis = 0.25;
  absl::Duration min_residence = absl::Seconds(10);
  int min_rollout_cells = 1;
  // The dead band, in batches of finished work waiting: release above the first, recall below
  // the second (release_backlog_batches > recall_backlog_batches >= 0).
  double release_backlog_batches = 0.7;
  double recall_backlog_batches = 0.05;
  // The averages' time constant and the least time between two moves, in learner steps.
  double smoothing_steps = 0.25;
  double move_interval_steps = 0.3;

  absl::Status Validate() const;
  std::string DebugString() const;
};

class BacklogController final : public RoleController {
 public:
  static absl::StatusOr<BacklogController> Create(BacklogControllerOptions options);

  absl::StatusOr<SchedulerDecision> Decide(const SchedulerObservation& observation) override;
  CellRole role(int satellite) const override;
  int satellites() const override { return options_.satellites; }
  int rollout_cells() const override;
  WorkUnit unit() const override { return options_.unit; }
  std::string DebugString() const override;
  const BacklogControllerOptions& options() const { return options_; }

 private:
  explicit BacklogController(BacklogControllerOptions options);

  absl::Status CheckObservation(const SchedulerObservation& o) const;
  // Measures the learner step's duration from the observations' step count.
  void MeasureStep(const SchedulerObservation& o);
  // The learner step's duration: measured, or before a step ended what `trainers` would take
  // for one batch; 0 when neither is known.
  double StepSeconds(const SchedulerObservation& o, int trainers) const;
  // The whole count of micro-steps per step both rules read: the average rounded, kept until
  // the average moves three quarters of a micro-step away from it, so that an average wavering
  // around a half (steps of 4 and 5) moves no trainer back and forth.
  void CountMicroSteps(double average);
  // Folds one observation into the averages.
  void Smooth(absl::Time now, double step_seconds, double backlog, bool short_of_rollout);
  // Live satellites (o.alive) in `role`.
  int LiveCells(const SchedulerObservation& o, CellRole role) const;
  // The candidates, among live satellites: the rollout satellite holding the fewest episodes
  // (ties: the highest id), the training satellite that switched longest ago (ties: the lowest
  // id); -1 when none.
  int ReleaseCandidate(const SchedulerObservation& o) const;
  int RecallCandidate(const SchedulerObservation& o) const;
  // Fills `d` with a move of `satellite` unless residence holds it back or it is -1.
  void MoveIfResident(int satellite, SchedulerDecision::Move move, SchedulerDecision::Cause cause,
                      SchedulerDecision& d) const;
  void DecideMove(SchedulerDecision& d) const;

  BacklogControllerOptions options_;
  std::vector<CellRole> roles_;          // per satellite
  std::vector<absl::Time> last_switch_;  // per satellite; InfinitePast() before the first
  absl::Time last_now_ = absl::InfinitePast();
  absl::Time last_move_ = absl::InfinitePast();
  int64_t last_step_ = -1;  // the step count seen last, and when it changed
  absl::Time last_step_time_;
  double step_seconds_ = 0;      // the learner step's duration, averaged; 0: not measured yet
  bool smoothed_ = false;        // the averages hold an observation
  double smoothed_backlog_ = 0;  // in the controller's unit
  double smoothed_short_ = 0;    // share of the recent time rollout was short
  int64_t micro_steps_ = 0;      // CountMicroSteps; 0: no step seen
  bool has_last_cause_ = false;
  SchedulerDecision::Cause last_cause_ = SchedulerDecision::Cause::kBalanced;
};

}  // namespace flywheel::scheduler

#endif  // FLYWHEEL_SCHEDULER_BACKLOG_CONTROLLER_H_
