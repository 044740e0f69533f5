// The elastic scheduler's default controller (ARCHITECTURE.md "Elastic scheduling"): it moves a
// satellite between rollout and training only when the work on one side plainly outgrows the
// other, so that on a steady load the split settles where production meets consumption and
// stays there, and when the load moves the split follows it.
//
// With R satellites rolling out, T training, `core_cells` cores (always training), w the work in
// flight (episodes, or the tokens still to generate) and c one rollout cell's capacity:
//
//   backlog_s  = backlog · train_seconds_per_unit / (core_cells + T)
//                the seconds the cells training now need to train what is finished and waiting
//   short      = admission_room > 0 and free_slots == 0
//                admission would start more episodes and no rollout cell has a slot for them
//
//   release    backlog_s > release_backlog_seconds               the trainers cannot keep up,
//   (to train) and w <= (R − 1) · c · (1 − hysteresis)            and the episodes fit on R − 1
//              the rollout satellite holding the fewest episodes leaves (the fewest to hand over)
//
//   recall     short most of the recent time                     rollout is the bottleneck,
//   (to roll.) and backlog_s < recall_backlog_seconds             and the trainers run dry
//              the satellite that has trained longest comes back
//
// Both backlog_s and short are averaged over `smoothing` first (an exponential moving average
// in time, about one learner step): within a step the backlog rises as its batch arrives and
// falls as it trains, and admission reopens at every publish; none of that is a reason to move.
//
// Why not the water-level rule's signals: with a staleness bound η ≥ 1 its "new batch demanded"
// (admission has room) reopens at every published step and its release fires whenever a batch
// drains, so satellites go back and forth about fifteen times a step. The backlog is what a
// trainer lacks or has too much of; release_backlog_seconds > recall_backlog_seconds is a dead
// band in which nothing moves.
//
// Floors and residence as in the water-level rule: while w > 0 at least min_rollout_cells
// satellites roll out (one comes back when fewer do), and a satellite keeps a role at least
// min_residence after a switch (a candidate held back by it blocks the move). One move per
// decision. Before the caller knows train_seconds_per_unit (0), backlog_s is 0: nothing is
// released, and rollout may recall.
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
  // The dead band, in seconds of training for the cells training now: release above the first,
  // recall below the second (release_backlog_seconds > recall_backlog_seconds >= 0).
  double release_backlog_seconds = 60;
  double recall_backlog_seconds = 10;
  // The time constant of the averages (0: none, every observation as it is).
  absl::Duration smoothing = absl::ZeroDuration();

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
  // Folds one observation into the averages.
  void Smooth(absl::Time now, double backlog_seconds, bool short_of_rollout);
  // The candidates: the rollout satellite holding the fewest episodes (ties: the highest id),
  // the training satellite that switched longest ago (ties: the lowest id); -1 when none.
  int ReleaseCandidate(const SchedulerObservation& o) const;
  int RecallCandidate() const;
  // Fills `d` with a move of `satellite` unless residence holds it back.
  void MoveIfResident(int satellite, SchedulerDecision::Move move, SchedulerDecision::Cause cause,
                      SchedulerDecision& d) const;
  void DecideMove(SchedulerDecision& d) const;

  BacklogControllerOptions options_;
  std::vector<CellRole> roles_;          // per satellite
  std::vector<absl::Time> last_switch_;  // per satellite; InfinitePast() before the first
  absl::Time last_now_ = absl::InfinitePast();
  bool smoothed_ = false;  // the averages hold an observation
  double smoothed_backlog_ = 0;
  double smoothed_short_ = 0;  // share of the recent time rollout was short
  bool has_last_cause_ = false;
  SchedulerDecision::Cause last_cause_ = SchedulerDecision::Cause::kBalanced;
};

}  // namespace flywheel::scheduler

#endif  // FLYWHEEL_SCHEDULER_BACKLOG_CONTROLLER_H_
