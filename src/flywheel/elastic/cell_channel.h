// What a cell asks of the elastic core: one small interface, two transports (as c10d's Store has
// HashStore and TCPStore behind one API).
//
//   ElasticCell ──▶ CellChannel ─┬─ LocalChannel    (local_channel.h): a cell that is a thread of
//                                │                  the core's process calls the control plane
//                                │                  and the step's queue directly
//                                └─ SchedulerClient (scheduler_client.h): a `flywheel cell`
//                                                   process, over gRPC to the SchedulerService,
//                                                   which serves each call on a LocalChannel
//
// Register checks the cell's config and model against the core's and hands out its id;
// Heartbeat carries its report (role, episode counts) and returns the role and admission the
// core wants; Join, Claim, Done, AwaitParticipants and Leave take part in the streaming learner
// step (scheduler/micro_step_queue.h). Blocking calls wait until their deadline at most
// (kDeadlineExceeded: not yet).
//
// Thread-safety: every method may be called from any thread.
#ifndef FLYWHEEL_ELASTIC_CELL_CHANNEL_H_
#define FLYWHEEL_ELASTIC_CELL_CHANNEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/learner/micro_step.h"
#include "flywheel/scheduler/micro_step_queue.h"
#include "flywheel/v1/scheduler_service.pb.h"

namespace flywheel {

class CellChannel {
 public:
  virtual ~CellChannel() = default;

  // Where the core is, for messages ("scheduler at HOST:PORT", "the in-process scheduler").
  virtual std::string Describe() const = 0;
  // Retries while the core is unreachable, until `timeout`; a hash mismatch is
  // kFailedPrecondition at once.
  virtual absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& request,
                                                        absl::Duration timeout) = 0;
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request,
                                                          absl::Duration timeout) = 0;
  // Blocks until step `step` has begun and `cell` joined it; the weights to train from.
  virtual absl::StatusOr<v1::JoinResponse> Join(int cell, int64_t step, absl::Time deadline) = 0;
  // The next micro-step of `step` for `cell`; null once the step is complete (go reduce).
  virtual absl::StatusOr<std::shared_ptr<const MicroStep>> Claim(int cell, int64_t step,
                                                                 absl::Time deadline) = 0;
  virtual absl::Status Done(int cell, int64_t step, int64_t id) = 0;
  // Blocks until `step` is complete: who reduces it, over which epoch, and D.
  virtual absl::StatusOr<StepParticipants> AwaitParticipants(int cell, int64_t step,
                                                             absl::Time deadline) = 0;
  // Gives the cell's claims of `step` back (step -1: none) and, with `exit`, unregisters it.
  // Returns how many micro-steps went back.
  virtual absl::StatusOr<int64_t> Leave(int cell, int64_t step, bool exit) = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_ELASTIC_CELL_CHANNEL_H_
