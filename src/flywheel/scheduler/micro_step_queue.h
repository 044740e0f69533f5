// The queue of micro-steps of one streaming learner step (QwenGyre's streaming training): the
// step is filled as complete groups of trajectories arrive, and training starts on the first
// ones instead of waiting for a full batch. Every training cell claims micro-steps from it; a
// satellite that joins mid-step claims whatever is left; a cell that dies has everything it
// claimed in the step re-queued. The queue also decides who reduces the step: the live cells
// that joined it, with the core first.
//
//   coordinator                 queue (one step at a time)                   cells
//   BeginStep(k, version) ──▶  ┌──────────────────────────────────────┐
//   Add(groups) ──staleness,──▶│ buffer ─(≥ token_budget)─▶ Packer ─▶ │ pending ─Claim─▶ core, sat…
//     advantages per group     │ u_t weights, D += Σ normaliser      │ ◀─Done(cell, id)─┘
//   Add(groups) …              │                                      │
//   Close() ──flush buffer───▶ │ complete: closed, all done by live   │─▶ AwaitParticipants:
//   Requeue(dead cell) ──────▶ │ cells  ⇒ participants, epoch, D      │   {core, live joiners}
//                              └──────────────────────────────────────┘
//
// Packing. Arrivals are buffered until they hold a micro-batch's worth of tokens
// (learner.token_budget); the buffer is then packed with the packer's carry_over, so full
// micro-batches become micro-steps and the trajectories of a part-filled last one wait for more
// (Close packs what is left). With execution_mean an execution is never split between two packs
// (its weight 1/n needs all of it), so there the whole buffer is packed and an execution must
// arrive in one Add. The loss weights are un-normalised (u_t; PackerOptions::
// normalise_weights = false); D, the step's trainable tokens / sequences / executions, is the
// sum over the packs and known once the step is closed (normaliser()).
//
// Advantages are computed per Add over its groups, so a group must arrive whole, in one Add
// (a group id seen twice in a step is an error). The staleness bound is applied at Add against
// the step's version.
//
// Claims. Core cells come first: a satellite takes a micro-step only when more are pending
// than core cells wait in Claim. A satellite that won a step's only micro-step would leave the
// core idle, and it is the cell that must go back to rollout, mid-micro-step, when a new batch is
// demanded; so satellites run what the core cells cannot run now, and who runs what does not
// depend on which thread the kernel wakes first.
//
// Completion. The step is complete when it is closed and every micro-step is done by a cell
// still alive. Requeue(cell) declares a cell dead for the step: EVERY micro-step it claimed,
// done or not, goes back to the queue (its accumulated gradient died with it). The participants
// of a complete step are the cells that joined it and are alive, the core cells first (each
// holds a shard of the optimiser, so every one of them must be there), then ascending; a
// new membership epoch is numbered whenever that list differs from the previous step's, so
// cells re-form their c10d group only when it changed (scheduler/step_group.h).
//
// Thread-safety: every method may be called from any thread. Lock order: pack_mu_ before mu_.
// Add and Close pack under pack_mu_ only, so claims are not blocked by packing. Every blocking
// call has a deadline and returns kCancelled after Cancel(), except AwaitParticipants of a step
// completed before it (see there).
#ifndef FLYWHEEL_SCHEDULER_MICRO_STEP_QUEUE_H_
#define FLYWHEEL_SCHEDULER_MICRO_STEP_QUEUE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/core/trajectory.h"
#include "flywheel/learner/advantages.h"
#include "flywheel/learner/learner_options.h"
#include "flywheel/learner/micro_step.h"
#include "flywheel/learner/packer.h"
#include "flywheel/learner/staleness.h"

namespace flywheel {

struct MicroStepQueueOptions {
  // Buckets, token budget, too_long and aggregation; carry_over and normalise_weights are the
  // queue's own (see the header comment).
  PackerOptions packer;
  AdvantageOptions advantages;
  int64_t max_staleness = -1;  // -1: no bound
  // The cells core_cell … core_cell + core_cells − 1 own the optimiser (a shard each): ranks
  // 0 … core_cells − 1 of every step's group, in that order.
  int core_cell = 0;
  int core_cells = 1;

  static MicroStepQueueOptions FromLearnerOptions(const LearnerOptions& o, int core_cell = 0,
                                                  int core_cells = 1);
  bool IsCore(int cell) const { return cell >= core_cell && cell < core_cell + core_cells; }
  absl::Status Validate() const;
  std::string DebugString() const;
};

// Who reduces a complete step, and over which group.
struct StepParticipants {
  int64_t step = -1;
  int64_t epoch = -1;      // membership epoch of `cells`; a new number whenever the list changes
  std::vector<int> cells;  // the core cells first, then the satellites in ascending id
  double normaliser = 0;   // the step's D
};

// Who ran what in a step (for reports and tests).
struct StepReport {
  int64_t step = -1;
  int64_t version = 0;
  int64_t micro_steps = 0;
  int64_t trainable_tokens = 0;
  double normaliser = 0;
  std::map<int, std::vector<int64_t>> ran_by;  // cell → ids of the micro-steps it completed
  int64_t claims = 0;                          // successful claims, re-runs included
  int64_t requeued = 0;                        // micro-steps sent back by Requeue
  std::vector<int> dead;
  int64_t kept = 0;  // trajectories taken (after the staleness bound and too-long drops)
  int64_t dropped_stale = 0;
  int64_t dropped_too_long = 0;
  std::map<int64_t, int64_t> lag_counts;  // exact lag → trajectories (kept and dropped stale)
  bool closed = false;
  bool complete = false;

  std::string DebugString() const;
};

class MicroStepQueue {
 public:
  explicit MicroStepQueue(MicroStepQueueOptions options);
  ~MicroStepQueue();

  // Starts step `step` from policy version `version` (what every micro-step trains from). The
  // previous step must be complete; `step` must increase.
  absl::Status BeginStep(int64_t step, int64_t version);
  // Blocks until step `step` (or a later one) has begun.
  absl::Status AwaitStep(int64_t step, absl::Time deadline);

  // Complete groups for the current step. Nothing of a bad Add is taken: a group seen in an
  // earlier Add, an invalid trajectory, one longer than the largest bucket (with too_long =
  // "error"), or an Add after Close or before BeginStep.
  absl::Status Add(std::vector<Trajectory> groups);
  // No more data for this step: packs what is buffered. D is known from now on.
  absl::Status Close();

  // `cell` takes part in step `step`. Fails once the step is complete (join the next one) or
  // for a cell declared dead in it. A satellite loads the core's weights after joining: the
  // core updates them only after every participant has reached the step's reduce.
  absl::Status Join(int cell, int64_t step);
  // The next micro-step for `cell` (which joined the current step); blocks until one is
  // pending. Returns null once the step is complete ("none left": go reduce). kDeadlineExceeded
  // at the deadline, kAborted for a cell declared dead.
  absl::StatusOr<std::shared_ptr<const MicroStep>> Claim(int cell, absl::Time deadline);
  // `cell` has accumulated micro-step `id` of the current step.
  absl::Status Done(int cell, int64_t id);
  // `cell` died: it leaves the step, and every micro-step it claimed in it goes back to the
  // queue. Returns how many. kFailedPrecondition once the step is complete: its participants'
  // reduce is under way and fails on its own (the group's timeout).
  absl::StatusOr<int64_t> Requeue(int cell);
  // `cell` leaves the current step alive (a satellite sent back to rollout): with no claim in
  // it, it is simply no longer a participant and may join again while the step runs; with
  // claims, as Requeue (its gradient will be in no reduce). Returns the micro-steps sent back.
  absl::StatusOr<int64_t> Leave(int cell);

  // Blocks until step `step` is complete and returns who reduces it (kept until the next step
  // completes). kFailedPrecondition when a core cell is not among them (it died or never
  // joined). A step completed before Cancel() still returns its participants: some of them may
  // already be forming its group, which waits for every one, so none may leave it.
  absl::StatusOr<StepParticipants> AwaitParticipants(int64_t step, absl::Time deadline);
  // Blocks until `count` micro-steps of step `step` are done (or it is complete).
  absl::Status AwaitDone(int64_t step, int64_t count, absl::Time deadline);
  // Blocks until `count` cells have joined step `step` (or it is complete).
  absl::Status AwaitJoined(int64_t step, int64_t count, absl::Time deadline);

  // D of the current step once it is closed; kFailedPrecondition before.
  absl::StatusOr<double> normaliser() const;
  bool complete() const;
  int64_t waiting_core_claims() const;  // core cells blocked in Claim now
  // Wakes every waiter with kCancelled; every later blocking call fails the same way, and no
  // step completes any more. A cell that stops in the middle of a step cancels, then asks for
  // the participants: either the step completed before (it reduces with them) or it never will
  // (nobody waits for it).
  void Cancel();

  StepReport report() const;  // of the current step
  std::string DebugString() const;

 private:
  struct Slot {
    std::shared_ptr<const MicroStep> micro_step;
    int cell = -1;  // claimed by; -1 while pending
    bool done = false;
  };

  // Packs the buffer into micro-batches (all of it when `flush`), leaving held-back
  // trajectories buffered.
  absl::StatusOr<PackedStep> PackBuffer(bool flush) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pack_mu_);
  void Publish(PackedStep packed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeComplete() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckStep(int64_t step, const char* what) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::string DebugStringLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const MicroStepQueueOptions options_;
  const absl::Status init_status_;  // options_.Validate(), returned by BeginStep
  const StalenessFilter staleness_;

  mutable absl::Mutex pack_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  Packer packer_ ABSL_GUARDED_BY(pack_mu_);           // carry_over, for Add
  Packer flush_packer_ ABSL_GUARDED_BY(pack_mu_);     // packs everything, for Close
  bool accepting_ ABSL_GUARDED_BY(pack_mu_) = false;  // between BeginStep and Close
  int64_t pack_step_ ABSL_GUARDED_BY(pack_mu_) = -1;
  int64_t pack_version_ ABSL_GUARDED_BY(pack_mu_) = 0;
  std::vector<Trajectory> buffer_ ABSL_GUARDED_BY(pack_mu_);
  std::vector<std::vector<float>> buffer_advantages_ ABSL_GUARDED_BY(pack_mu_);
  int64_t buffered_tokens_ ABSL_GUARDED_BY(pack_mu_) = 0;
  std::set<std::string> groups_seen_ ABSL_GUARDED_BY(pack_mu_);
  std::set<std::string> executions_seen_ ABSL_GUARDED_BY(pack_mu_);

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // signalled on every change a waiter may wait for
  int64_t waiting_cores_ ABSL_GUARDED_BY(mu_) = 0;  // core cells blocked in Claim
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  int64_t step_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool complete_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);      // by micro-step id
  std::deque<int64_t> pending_ ABSL_GUARDED_BY(mu_);  // ids, claimed from the front
  int64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<int> joined_ ABSL_GUARDED_BY(mu_);  // alive members of the step
  std::set<int> dead_ ABSL_GUARDED_BY(mu_);    // declared dead in the step (Requeue)
  double normaliser_ ABSL_GUARDED_BY(mu_) = 0;
  StepReport report_ ABSL_GUARDED_BY(mu_);
  // The latest complete step's participants (or why it has none usable), and the epoch count.
  absl::StatusOr<StepParticipants> participants_ ABSL_GUARDED_BY(mu_);
  int64_t participants_step_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<int> epoch_cells_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel

#endif  // FLYWHEEL_SCHEDULER_MICRO_STEP_QUEUE_H_
