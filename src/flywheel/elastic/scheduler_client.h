// A `flywheel cell` process's channel to the core (cell_channel.h) over gRPC, to the scheduler
// service (scheduler_service.h): the calls, with the long polls turned into blocking calls with a
// deadline; and the heartbeat thread every cell runs, over either channel.
//
//   cell:  CellChannel (SchedulerClient, or LocalChannel in process) ── Register ─▶ id
//          HeartbeatSender (thread) ── Heartbeat every interval ─▶ latest(): role, step, grant
//          main thread: Join(step) ─▶ Claim ─▶ RunMicroStep ─▶ Done … ─▶ AwaitParticipants
//
// Thread-safe (gRPC stubs are); every call has a deadline. Errors are the service's statuses
// with its message, prefixed "scheduler at ADDR: <call>".
#ifndef FLYWHEEL_ELASTIC_SCHEDULER_CLIENT_H_
#define FLYWHEEL_ELASTIC_SCHEDULER_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/elastic/cell_channel.h"
#include "flywheel/learner/micro_step.h"
#include "flywheel/rpc/rpc_security.h"
#include "flywheel/scheduler/micro_step_queue.h"
#include "flywheel/v1/scheduler_service.grpc.pb.h"

namespace flywheel {

class SchedulerClient final : public CellChannel {
 public:
  // `security`: the token to send and the TLS to use; a token that would go in the clear
  // beyond loopback is kFailedPrecondition here (rpc_security.h).
  static absl::StatusOr<std::unique_ptr<SchedulerClient>> Connect(const std::string& address,
                                                                  const RpcSecurity& security = {});

  const std::string& address() const { return address_; }

  // Retries while the service is unreachable, until `timeout` (a cell may start before the core).
  absl::StatusOr<v1::RegisterResponse> Register(const std::string& config_hash,
                                                const std::string& model_hash,
                                                const std::string& name,
                                                absl::Duration timeout = absl::Seconds(30));
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(int cell,
                                                  absl::Duration timeout = absl::Seconds(5));

  std::string Describe() const override;
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

 private:
  SchedulerClient() = default;
  // A context with the token and a deadline of `timeout`.
  std::unique_ptr<grpc::ClientContext> NewContext(absl::Duration timeout) const;
  // How long one long poll may wait before the overall `deadline`.
  static int64_t PollMillis(absl::Time deadline);

  std::string address_;
  std::string auth_token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::SchedulerService::Stub> stub_;
};

// Sends one cell's heartbeats from its own thread, every `interval`, and keeps the latest reply
// (the role the core wants and the current step) for the cell's main loop.
class HeartbeatSender {
 public:
  // Fills a heartbeat's report (everything but the cell id); called on the sender's thread.
  using Report = std::function<void(v1::HeartbeatRequest&)>;

  // `channel` is borrowed and must outlive this object. Without `report` the heartbeats carry
  // the cell id alone.
  HeartbeatSender(CellChannel* channel, int cell, absl::Duration interval, Report report = nullptr);
  ~HeartbeatSender();  // Stop()

  // The latest reply, or the latest error (a cell declared dead gets kFailedPrecondition).
  absl::StatusOr<v1::HeartbeatResponse> latest() const;
  // Blocks until a reply says role `role` at step ≥ `min_step`, or finished. A failed heartbeat
  // that may pass next time (kUnavailable, kDeadlineExceeded: the core briefly unreachable or
  // slow) is waited out; any other error (declared dead, unknown cell) ends the wait with it.
  absl::StatusOr<v1::HeartbeatResponse> AwaitRole(v1::CellRole role, int64_t min_step,
                                                  absl::Time deadline) const;
  // Whether a reply has said the run finished (it stays so; the core may be gone since). Waits
  // up to `timeout` for one: a call that failed as the core shut down is followed by it.
  bool AwaitFinished(absl::Duration timeout) const;
  // Sends the next heartbeat now rather than at the end of the interval (the cell's report
  // changed in a way the core should see soon: a role reached, admission used up).
  void Poke();
  // Blocks until a reply newer than the `seen`-th has arrived (or the deadline); returns the
  // count of replies so far, to pass next time. The cell's loop waits here between two looks.
  int64_t AwaitReply(int64_t seen, absl::Time deadline) const;
  void Stop();
  int64_t sent() const;

 private:
  void Run();

  CellChannel* const channel_;  // borrowed
  const int cell_;
  const absl::Duration interval_;
  const Report report_;
  mutable absl::Mutex mu_;
  bool poked_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::StatusOr<v1::HeartbeatResponse> latest_ ABSL_GUARDED_BY(mu_);
  int64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_ELASTIC_SCHEDULER_CLIENT_H_
