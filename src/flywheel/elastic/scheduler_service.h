// The elastic scheduler's gRPC service (proto/flywheel/v1/scheduler_service.proto), hosted by
// the core cell's process: cells that run as separate processes register, heartbeat, join the
// streaming learner step and claim its micro-steps from the core's MicroStepQueue (the queue is
// the production one, borrowed; this class only puts it on the wire and watches the cells).
//
//   satellite process                      core process
//                                          ┌ SchedulerService ──────────────────────────────┐
//   Register(hashes) ────────────────────▶ │ cells: id → last heartbeat, role, dead?        │
//   Heartbeat ───────────────────────────▶ │   ◀── SetRole(cell, train) (the controller)    │
//   Join / Claim / Done ─────────────────▶ │ MicroStepQueue* (borrowed) ◀── core thread:    │
//   AwaitParticipants, Leave ────────────▶ │   BeginStep (through here), Add, Close, claims │
//                                          │ monitor thread: no heartbeat for timeout ⇒     │
//                                          │   dead; queue->Requeue(cell)                   │
//                                          └────────────────────────────────────────────────┘
//
// Register compares the cell's config hash and model hash with the core's: a mismatch is
// kFailedPrecondition naming both hashes (a cell built from another config would compute other
// gradients). A registered cell gets a fresh id (never reused) and starts in the rollout role.
//
// Heartbeats. A cell that sends nothing (any call counts) for heartbeat_timeout is declared
// dead: every micro-step it claimed in the current step, done or not, goes back to the queue
// (MicroStepQueue::Requeue), so the step completes without it; its later calls are refused
// (kFailedPrecondition: register again). A cell that dies after its step completed cannot be
// requeued: the participants' reduce fails on its own (the group's timeout).
//
// Leave. A cell that stops training mid-step without having run anything gives its claims back
// (Leave with the step); a cell that exits cleanly says so (exit) and is unregistered at once,
// without waiting for the heartbeat timeout.
//
// Heartbeats carry what the core's controller needs to decide roles and admission: the cell's
// current role, the episodes it started and finished, its engine's weights version (cells()).
//
// Bad calls are refused with a clear status, never a crash: an unknown cell (kNotFound), a
// step other than the current one (kFailedPrecondition), a micro-step id the step does not have
// or did not give this cell (the queue's errors).
//
// Thread-safety: every method may be called from any thread. Lock order: mu_ before the
// queue's locks (the queue never calls back); blocking queue calls (Claim, AwaitStep,
// AwaitParticipants) are made without mu_.
#ifndef FLYWHEEL_ELASTIC_SCHEDULER_SERVICE_H_
#define FLYWHEEL_ELASTIC_SCHEDULER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/rpc/call_limiter.h"
#include "flywheel/rpc/rpc_security.h"
#include "flywheel/rpc/server_limits.h"
#include "flywheel/scheduler/micro_step_queue.h"
#include "flywheel/v1/scheduler_service.grpc.pb.h"

namespace flywheel {

struct SchedulerServiceOptions {
  // Digests every cell must match (Register): of the job config and of the model.
  std::string config_hash;
  std::string model_hash;
  // Cells heartbeat this often; one silent for heartbeat_timeout is declared dead.
  absl::Duration heartbeat_interval = absl::Milliseconds(200);
  absl::Duration heartbeat_timeout = absl::Seconds(2);
  // The longest a long poll (Join, Claim, AwaitParticipants) waits before "not yet", so that a
  // blocked handler notices a shutdown soon.
  absl::Duration max_wait = absl::Seconds(2);
  int core_cell = 0;            // the in-process core; satellites get ids above it
  std::string store_address;    // handed to cells: the TCPStore their groups form over
  std::string weights_address;  // handed to cells: the core's weights service (or empty)

  absl::Status Validate() const;
};

// A cell as the service sees it (for the core's controller, reports and tests).
struct CellInfo {
  int cell = -1;
  std::string name;
  v1::CellRole role = v1::CELL_ROLE_ROLLOUT;  // the role the core wants
  bool dead = false;
  bool left = false;     // dead because it said so (Leave with exit), not by silence
  int64_t requeued = 0;  // micro-steps sent back when it was declared dead
  absl::Time last_seen;
  // What its latest heartbeat reported.
  v1::CellRole reported_role = v1::CELL_ROLE_UNSPECIFIED;  // unspecified before the first
  int64_t dispatched = 0;
  int64_t finished = 0;
  int64_t weights_version = -1;
  double remaining_tokens = 0;
  // Its admission (SetAdmission), sent in every heartbeat reply.
  int64_t admit_until = 0;
  int64_t admit_version = 0;
};

class SchedulerService final : public v1::SchedulerService::Service {
 public:
  // `queue` is borrowed and must outlive this object; its core cell must be options.core_cell.
  // `auth_token` empty: no authentication. `limits` bound the calls in handlers at once.
  SchedulerService(MicroStepQueue* queue, SchedulerServiceOptions options,
                   std::string auth_token = "", const ServerLimits& limits = {});
  ~SchedulerService() override;  // stops the heartbeat monitor

  // The core's side. BeginStep starts the queue's step and records the core's optimiser counter,
  // which Join hands to the cells (so their lr schedule is the core's).
  absl::Status BeginStep(int64_t step, int64_t version, int64_t optimizer_step);
  // The role a cell's heartbeats carry from now on (kNotFound for an unknown cell).
  absl::Status SetRole(int cell, v1::CellRole role);
  // The admission a cell's heartbeats carry from now on (kNotFound for an unknown cell).
  absl::Status SetAdmission(int cell, int64_t admit_until, int64_t admit_version);
  // Heartbeats answer finished = true from now on.
  void SetFinished();
  std::vector<CellInfo> cells() const;
  // Blocks until `cell` is declared dead (kDeadlineExceeded otherwise).
  absl::Status AwaitDead(int cell, absl::Time deadline) const;
  // Blocks until `count` cells have registered.
  absl::Status AwaitRegistered(int count, absl::Time deadline) const;

  grpc::Status Register(grpc::ServerContext* context, const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status Join(grpc::ServerContext* context, const v1::JoinRequest* request,
                    v1::JoinResponse* response) override;
  grpc::Status Claim(grpc::ServerContext* context, const v1::ClaimRequest* request,
                     v1::ClaimResponse* response) override;
  grpc::Status Done(grpc::ServerContext* context, const v1::DoneRequest* request,
                    v1::DoneResponse* response) override;
  grpc::Status AwaitParticipants(grpc::ServerContext* context,
                                 const v1::AwaitParticipantsRequest* request,
                                 v1::AwaitParticipantsResponse* response) override;
  grpc::Status Leave(grpc::ServerContext* context, const v1::LeaveRequest* request,
                     v1::LeaveResponse* response) override;

 private:
  // Auth, then the cell is known and alive (refreshing its last heartbeat).
  absl::Status CheckCall(const grpc::ServerContext* context, int cell) ABSL_LOCKS_EXCLUDED(mu_);
  // kFailedPrecondition unless `step` is the current one.
  absl::Status CheckStep(int cell, int64_t step, const char* what) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Time WaitDeadline(int64_t wait_ms) const;
  void Monitor();
  void DeclareDead(CellInfo& cell, absl::Duration silent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  MicroStepQueue* const queue_;  // borrowed
  const SchedulerServiceOptions options_;
  const std::string auth_token_;
  CallLimiter limiter_;
  const absl::Status init_status_;  // options_.Validate(); every call fails with it

  mutable absl::Mutex mu_;
  std::map<int, CellInfo> cells_ ABSL_GUARDED_BY(mu_);
  int next_cell_ ABSL_GUARDED_BY(mu_);
  int64_t step_ ABSL_GUARDED_BY(mu_) = -1;  // the step being filled
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t optimizer_step_ ABSL_GUARDED_BY(mu_) = 0;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread monitor_;  // declares silent cells dead
};

struct SchedulerServerOptions {
  std::string address = "127.0.0.1:0";  // port 0: pick a free one (see address())
  SchedulerServiceOptions service;
  RpcSecurity security;  // auth token, TLS, --insecure (rpc_security.h)
  ServerLimits limits;
};

// The service on its own gRPC server.
class SchedulerServer {
 public:
  static absl::StatusOr<std::unique_ptr<SchedulerServer>> Start(MicroStepQueue* queue,
                                                                SchedulerServerOptions options);
  ~SchedulerServer();

  std::string address() const;  // host:port actually bound
  SchedulerService& service() { return *service_; }
  void Shutdown();

 private:
  SchedulerServer() = default;
  std::unique_ptr<SchedulerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string host_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace flywheel

#endif  // FLYWHEEL_ELASTIC_SCHEDULER_SERVICE_H_
