#include "flywheel/elastic/local_channel.h"

#include <algorithm>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {

absl::Status LocalChannel::BeginStep(int64_t step, int64_t version, int64_t optimizer_step) {
  return plane_->BeginStep(step, version, optimizer_step,
                           [&] { return queue_->BeginStep(step, version); });
}

absl::StatusOr<v1::RegisterResponse> LocalChannel::Register(const v1::RegisterRequest& request,
                                                            absl::Duration /*timeout*/) {
  return plane_->Register(request);
}

absl::StatusOr<v1::HeartbeatResponse> LocalChannel::Heartbeat(const v1::HeartbeatRequest& request,
                                                              absl::Duration /*timeout*/) {
  return plane_->Heartbeat(request);
}

absl::StatusOr<v1::JoinResponse> LocalChannel::Join(int cell, int64_t step, absl::Time deadline) {
  RETURN_IF_ERROR(plane_->CheckCell(cell));
  RETURN_IF_ERROR(queue_->AwaitStep(step, deadline));
  v1::JoinResponse response;
  RETURN_IF_ERROR(plane_->AtStep(cell, step, "joins",
                                 [&](int64_t version, int64_t optimizer_step) -> absl::Status {
                                   RETURN_IF_ERROR(queue_->Join(cell, step));
                                   response.set_joined(true);
                                   response.set_version(version);
                                   response.set_optimizer_step(optimizer_step);
                                   return absl::OkStatus();
                                 }));
  return response;
}

absl::StatusOr<std::shared_ptr<const MicroStep>> LocalChannel::Claim(int cell, int64_t step,
                                                                     absl::Time deadline) {
  RETURN_IF_ERROR(plane_->CheckCell(cell));
  // A step that has completed (and was followed by the next) has nothing left for anybody.
  const int64_t current = plane_->step();
  if (step > current) {
    return absl::FailedPreconditionError(
        StrCat("cell ", cell, " claims in step ", step, " but the current step is ", current));
  }
  if (step < current) return std::shared_ptr<const MicroStep>();
  absl::StatusOr<std::shared_ptr<const MicroStep>> claimed = queue_->Claim(cell, deadline);
  // The step completed and the next began between the check and the claim.
  if (!claimed.ok() && !absl::IsDeadlineExceeded(claimed.status()) && plane_->step() > step) {
    return std::shared_ptr<const MicroStep>();
  }
  return claimed;
}

absl::Status LocalChannel::Done(int cell, int64_t step, int64_t id) {
  RETURN_IF_ERROR(plane_->CheckCell(cell));
  return plane_->AtStep(cell, step, "reports a micro-step of",
                        [&](int64_t, int64_t) { return queue_->Done(cell, id); });
}

absl::StatusOr<StepParticipants> LocalChannel::AwaitParticipants(int cell, int64_t step,
                                                                 absl::Time deadline) {
  RETURN_IF_ERROR(plane_->CheckCell(cell));
  ASSIGN_OR_RETURN(StepParticipants participants, queue_->AwaitParticipants(step, deadline));
  if (std::find(participants.cells.begin(), participants.cells.end(), cell) ==
      participants.cells.end()) {
    return absl::FailedPreconditionError(StrCat("cell ", cell, " is not a participant of step ",
                                                step, " (they are ",
                                                flywheel::Join(participants.cells, ", "), ")"));
  }
  return participants;
}

absl::StatusOr<int64_t> LocalChannel::Leave(int cell, int64_t step, bool exit) {
  // As a death, without the wait: whatever it claimed in the current step goes back.
  if (exit) return plane_->Exit(cell);
  RETURN_IF_ERROR(plane_->CheckCell(cell));
  if (step < 0) return 0;
  // Its gradient will be in no reduce: every claim goes back, done or not (a cell without claims
  // may join the step again). Fails once the step is complete: the cell is a participant and
  // must reduce it.
  int64_t requeued = 0;
  RETURN_IF_ERROR(plane_->AtStep(cell, step, "leaves", [&](int64_t, int64_t) -> absl::Status {
    ASSIGN_OR_RETURN(requeued, queue_->Leave(cell));
    return absl::OkStatus();
  }));
  return requeued;
}

}  // namespace flywheel
