// The c10d group a cell reduces a streaming step over: the step's participants
// (MicroStepQueue::AwaitParticipants), formed over dist::Membership epochs. The queue numbers a
// new epoch only when the participant list changes, so a cell keeps its communicator from one
// step to the next while nobody joins or leaves, and forms a fresh group (fresh store keys,
// "epoch/<e>/…") when the list changed:
//
//   step 3: {0}      epoch 0   core alone: no group (FinishStep(nullptr, D))
//   step 4: {0,1}    epoch 1   cells 0, 1: ProposeEpoch(1, {0,1}), FormGroup(1)
//   step 5: {0,1}    epoch 1   reused
//   step 6: {0,1,2}  epoch 2   cells 0, 1, 2 form epoch 2 (cell 2 joined mid-step)
//
// Every participant proposes the list it was given; the proposal is idempotent, so the first
// one to get there publishes it and the others check that they agree.
//
// Not thread-safe: one per cell, used by the cell's thread.
#ifndef FLYWHEEL_SCHEDULER_STEP_GROUP_H_
#define FLYWHEEL_SCHEDULER_STEP_GROUP_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "flywheel/dist/communicator.h"
#include "flywheel/dist/membership.h"
#include "flywheel/learner/streaming_learner.h"
#include "flywheel/scheduler/micro_step_queue.h"

namespace flywheel {

class StepGroup {
 public:
  // `membership` is borrowed (it must outlive this) and may be shared by the cells of a
  // process; `cell` is this cell's id.
  StepGroup(dist::Membership* membership, int cell);
  ~StepGroup();

  // The communicator of `participants` (this cell must be one; the core is rank 0), owned by
  // this object until the next call, or null when the cell is alone in the step. Every
  // participant calls it (forming a group waits for all of them).
  absl::StatusOr<dist::Communicator*> For(const StepParticipants& participants);

  int64_t epoch() const { return epoch_; }           // of the communicator held, -1 if none
  int64_t groups_formed() const { return formed_; }  // how many times a group was formed

 private:
  dist::Membership* membership_;  // borrowed
  int cell_;
  int64_t epoch_ = -1;
  std::unique_ptr<dist::Communicator> comm_;
  int64_t formed_ = 0;
};

// The end of a streaming step for one in-process cell: waits (polling `stopping` every `poll`)
// until step `step` of `queue` is complete, forms its participants' group and runs `learner`'s
// FinishStep over it. Once `stopping` returns true it cancels the queue and returns kCancelled,
// unless the step completed before: then the others may be forming its group already, and the
// cell reduces with them (a cell that left would keep them waiting for the group's timeout).
absl::StatusOr<StreamingStepResult> ReduceStep(MicroStepQueue& queue, StepGroup& group,
                                               StreamingLearner& learner, int64_t step,
                                               const std::function<bool()>& stopping,
                                               absl::Duration poll);

}  // namespace flywheel

#endif  // FLYWHEEL_SCHEDULER_STEP_GROUP_H_
