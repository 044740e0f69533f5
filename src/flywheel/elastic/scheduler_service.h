// The elastic scheduler's gRPC service (proto/flywheel/v1/scheduler_service.proto), hosted by
// the core's process for cells that run as `flywheel cell` processes. A thin adapter: every call
// is served by the in-process channel (local_channel.h) over the one control plane
// (control_plane.h) and the core's micro-step queue; this class adds what the wire needs.
//
//   satellite process                    core process
//   Register / Heartbeat ──────────────▶ SchedulerService ─▶ LocalChannel ─▶ ControlPlane
//   Join / Claim / Done / …  ──────────▶   auth (bearer token), call limits,    ─▶ MicroStepQueue
//                                          long polls capped at max_wait ("not yet"),
//                                          micro-steps as raw tensor bytes (micro_step_wire.h)
//
// Long polls (Join, Claim, AwaitParticipants) wait at most max_wait on the server and then answer
// "not yet", so that a blocked handler never outlives a shutdown by long; the client calls again
// until its own deadline. A status of the channel reaches the cell with its code and message,
// prefixed "scheduler: ".
//
// Thread-safety: every method may be called from any thread.
#ifndef FLYWHEEL_ELASTIC_SCHEDULER_SERVICE_H_
#define FLYWHEEL_ELASTIC_SCHEDULER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/elastic/local_channel.h"
#include "flywheel/rpc/call_limiter.h"
#include "flywheel/rpc/rpc_security.h"
#include "flywheel/rpc/server_limits.h"
#include "flywheel/v1/scheduler_service.grpc.pb.h"

namespace flywheel {

class SchedulerService final : public v1::SchedulerService::Service {
 public:
  // `channel` is borrowed and must outlive this object. `auth_token` empty: no authentication.
  SchedulerService(LocalChannel* channel, absl::Duration max_wait, std::string auth_token = "",
                   const ServerLimits& limits = {});

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
  // The call got a slot and carries the bearer token: OK to go on.
  grpc::Status Admitted(const grpc::ServerContext* context, const CallSlot& slot) const;
  absl::Time WaitDeadline(int64_t wait_ms) const;

  LocalChannel* const channel_;  // borrowed
  const absl::Duration max_wait_;
  const std::string auth_token_;
  CallLimiter limiter_;
};

struct SchedulerServerOptions {
  std::string address = "127.0.0.1:0";  // port 0: pick a free one (see address())
  // The longest a long poll (Join, Claim, AwaitParticipants) waits before "not yet".
  absl::Duration max_wait = absl::Seconds(2);
  RpcSecurity security;  // auth token, TLS, --insecure (rpc_security.h)
  ServerLimits limits;
};

// The service on its own gRPC server.
class SchedulerServer {
 public:
  static absl::StatusOr<std::unique_ptr<SchedulerServer>> Start(LocalChannel* channel,
                                                                SchedulerServerOptions options);
  ~SchedulerServer();

  std::string address() const;  // host:port actually bound
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
