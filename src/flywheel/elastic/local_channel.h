// The in-process channel: a cell's calls (cell_channel.h) served on the control plane and the
// core's micro-step queue, for cells that are threads of the core's process. The gRPC
// SchedulerService serves every call of a `flywheel cell` process on one of these too, so the
// rules of a call (which step, whose claim, a dead cell refused) are written once, here.
//
//   cell thread ─▶ LocalChannel ─┬─▶ ControlPlane: Register, Heartbeat, the cell alive?, the step
//   gRPC handler ─┘              └─▶ MicroStepQueue (borrowed): Join, Claim, Done, Leave, …
//
// Bad calls get a clear status and change nothing: an unknown cell (kNotFound), a dead one or a
// step other than the current one (kFailedPrecondition), a micro-step the step does not have
// (kInvalidArgument) or that another cell claimed.
//
// Thread-safety: every method may be called from any thread. Blocking queue calls (AwaitStep,
// Claim, AwaitParticipants) are made without the control plane's lock.
#ifndef FLYWHEEL_ELASTIC_LOCAL_CHANNEL_H_
#define FLYWHEEL_ELASTIC_LOCAL_CHANNEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "flywheel/elastic/cell_channel.h"
#include "flywheel/elastic/control_plane.h"
#include "flywheel/scheduler/micro_step_queue.h"

namespace flywheel {

class LocalChannel final : public CellChannel {
 public:
  // Both borrowed; they must outlive the channel. The plane's requeue callback should be
  // RequeueOn(queue).
  LocalChannel(ControlPlane* plane, MicroStepQueue* queue) : plane_(plane), queue_(queue) {}

  static ControlPlane::Requeue RequeueOn(MicroStepQueue* queue) {
    return [queue](int cell) { return queue->Requeue(cell); };
  }

  // The core's side: starts the queue's step `step` from `version` and tells the control plane.
  absl::Status BeginStep(int64_t step, int64_t version, int64_t optimizer_step);

  std::string Describe() const override { return "the in-process scheduler"; }
  absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& request,
                                                absl::Duration timeout) override;
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request,
                                                  absl::Duration timeout) override;
  absl::StatusOr<v1::JoinResponse> Join(int cell, int64_t step, absl::Time deadline) override;
  absl::StatusOr<std::shared_ptr<const MicroStep>> Claim(int cell, int64_t step,
                                                         absl::Time deadline) override;
  absl::Status Done(int cell, int64_t step, int64_t id) override;
  absl::StatusOr<StepParticipants> AwaitParticipants(int cell, int64_t step,
                                                     absl::Time deadline) override;
  absl::StatusOr<int64_t> Leave(int cell, int64_t step, bool exit) override;

  ControlPlane& plane() { return *plane_; }

 private:
  ControlPlane* const plane_;    // borrowed
  MicroStepQueue* const queue_;  // borrowed
};

}  // namespace flywheel

#endif  // FLYWHEEL_ELASTIC_LOCAL_CHANNEL_H_
