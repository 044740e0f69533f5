#include "flywheel/scheduler/step_group.h"

#include <utility>

#include "absl/time/clock.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {

StepGroup::StepGroup(dist::Membership* membership, int cell)
    : membership_(membership), cell_(cell) {}

StepGroup::~StepGroup() = default;

absl::StatusOr<dist::Communicator*> StepGroup::For(const StepParticipants& participants) {
  const std::string context = StrCat("cell ", cell_, ": group of step ", participants.step,
                                     " (epoch ", participants.epoch, ")");
  RETURN_IF_ERROR(Annotate(dist::Membership::RankOf(participants.cells, cell_).status(), context));
  if (participants.cells.size() == 1) return nullptr;
  if (comm_ != nullptr && epoch_ == participants.epoch) return comm_.get();
  comm_.reset();  // the old group's threads and sockets go before the new one forms
  epoch_ = -1;
  RETURN_IF_ERROR(
      Annotate(membership_->ProposeEpoch(participants.epoch, participants.cells), context));
  absl::StatusOr<std::unique_ptr<dist::Communicator>> comm =
      membership_->FormGroup(participants.epoch, participants.cells, cell_);
  if (!comm.ok()) return Annotate(comm.status(), context);
  comm_ = *std::move(comm);
  epoch_ = participants.epoch;
  ++formed_;
  return comm_.get();
}

absl::StatusOr<StreamingStepResult> ReduceStep(MicroStepQueue& queue, StepGroup& group,
                                               StreamingLearner& learner, int64_t step,
                                               const std::function<bool()>& stopping,
                                               absl::Duration poll) {
  StepParticipants participants;
  while (true) {
    // After Cancel no step completes: this one either did already or never will.
    if (stopping()) queue.Cancel();
    absl::StatusOr<StepParticipants> p = queue.AwaitParticipants(step, absl::Now() + poll);
    if (absl::IsDeadlineExceeded(p.status())) continue;
    if (absl::IsCancelled(p.status())) return absl::CancelledError("the job is stopping");
    if (!p.ok()) return p.status();
    participants = *std::move(p);
    break;
  }
  absl::StatusOr<dist::Communicator*> comm = group.For(participants);
  if (!comm.ok()) return comm.status();
  return learner.FinishStep(*comm, participants.normaliser);
}

}  // namespace flywheel
