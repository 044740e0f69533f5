#include "flywheel/elastic/scheduler_service.h"

#include <algorithm>
#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/rpc/auth.h"
#include "flywheel/scheduler/micro_step_wire.h"

namespace flywheel {
namespace {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(status.code())),
                      StrCat("scheduler: ", status.message()));
}

}  // namespace

SchedulerService::SchedulerService(LocalChannel* channel, absl::Duration max_wait,
                                   std::string auth_token, const ServerLimits& limits)
    : channel_(channel),
      max_wait_(max_wait),
      auth_token_(std::move(auth_token)),
      limiter_("scheduler", limits) {}

grpc::Status SchedulerService::Admitted(const grpc::ServerContext* context,
                                        const CallSlot& slot) const {
  if (!slot.admitted()) return slot.refusal();
  return CheckBearerToken(context, auth_token_, "scheduler");
}

absl::Time SchedulerService::WaitDeadline(int64_t wait_ms) const {
  return absl::Now() + std::clamp(absl::Milliseconds(wait_ms), absl::ZeroDuration(), max_wait_);
}

grpc::Status SchedulerService::Register(grpc::ServerContext* context,
                                        const v1::RegisterRequest* request,
                                        v1::RegisterResponse* response) {
  CallSlot slot = limiter_.Admit(context, CallKind::kUnary);
  if (grpc::Status s = Admitted(context, slot); !s.ok()) return s;
  v1::RegisterRequest named = *request;
  if (named.name().empty()) named.set_name(context->peer());
  absl::StatusOr<v1::RegisterResponse> registered = channel_->Register(named, absl::ZeroDuration());
  if (!registered.ok()) return ToGrpc(registered.status());
  *response = *std::move(registered);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Heartbeat(grpc::ServerContext* context,
                                         const v1::HeartbeatRequest* request,
                                         v1::HeartbeatResponse* response) {
  CallSlot slot = limiter_.Admit(context, CallKind::kUnary);
  if (grpc::Status s = Admitted(context, slot); !s.ok()) return s;
  absl::StatusOr<v1::HeartbeatResponse> reply = channel_->Heartbeat(*request, absl::ZeroDuration());
  if (!reply.ok()) return ToGrpc(reply.status());
  *response = *std::move(reply);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Join(grpc::ServerContext* context, const v1::JoinRequest* request,
                                    v1::JoinResponse* response) {
  CallSlot slot = limiter_.Admit(context, CallKind::kUnary);
  if (grpc::Status s = Admitted(context, slot); !s.ok()) return s;
  absl::StatusOr<v1::JoinResponse> joined =
      channel_->Join(request->cell(), request->step(), WaitDeadline(request->wait_ms()));
  if (absl::IsDeadlineExceeded(joined.status())) {
    response->set_joined(false);
    return grpc::Status::OK;
  }
  if (!joined.ok()) return ToGrpc(joined.status());
  *response = *std::move(joined);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Claim(grpc::ServerContext* context, const v1::ClaimRequest* request,
                                     v1::ClaimResponse* response) {
  CallSlot slot = limiter_.Admit(context, CallKind::kUnary);
  if (grpc::Status s = Admitted(context, slot); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<const MicroStep>> ms =
      channel_->Claim(request->cell(), request->step(), WaitDeadline(request->wait_ms()));
  if (absl::IsDeadlineExceeded(ms.status())) {
    response->set_outcome(v1::ClaimResponse::NOT_YET);
    return grpc::Status::OK;
  }
  if (!ms.ok()) return ToGrpc(ms.status());
  if (*ms == nullptr) {
    response->set_outcome(v1::ClaimResponse::NONE_LEFT);
    return grpc::Status::OK;
  }
  if (absl::Status s = MicroStepToWire(**ms, response->mutable_micro_step()); !s.ok()) {
    return ToGrpc(s);
  }
  response->set_outcome(v1::ClaimResponse::MICRO_STEP);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Done(grpc::ServerContext* context, const v1::DoneRequest* request,
                                    v1::DoneResponse* /*response*/) {
  CallSlot slot = limiter_.Admit(context, CallKind::kUnary);
  if (grpc::Status s = Admitted(context, slot); !s.ok()) return s;
  return ToGrpc(channel_->Done(request->cell(), request->step(), request->id()));
}

grpc::Status SchedulerService::AwaitParticipants(grpc::ServerContext* context,
                                                 const v1::AwaitParticipantsRequest* request,
                                                 v1::AwaitParticipantsResponse* response) {
  CallSlot slot = limiter_.Admit(context, CallKind::kUnary);
  if (grpc::Status s = Admitted(context, slot); !s.ok()) return s;
  absl::StatusOr<StepParticipants> participants = channel_->AwaitParticipants(
      request->cell(), request->step(), WaitDeadline(request->wait_ms()));
  if (absl::IsDeadlineExceeded(participants.status())) {
    response->set_ready(false);
    return grpc::Status::OK;
  }
  if (!participants.ok()) return ToGrpc(participants.status());
  response->set_ready(true);
  response->set_step(participants->step);
  response->set_epoch(participants->epoch);
  for (const int c : participants->cells) response->add_cells(c);
  response->set_normaliser(participants->normaliser);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Leave(grpc::ServerContext* context, const v1::LeaveRequest* request,
                                     v1::LeaveResponse* response) {
  CallSlot slot = limiter_.Admit(context, CallKind::kUnary);
  if (grpc::Status s = Admitted(context, slot); !s.ok()) return s;
  absl::StatusOr<int64_t> requeued =
      channel_->Leave(request->cell(), request->step(), request->exit());
  if (!requeued.ok()) return ToGrpc(requeued.status());
  response->set_requeued(*requeued);
  return grpc::Status::OK;
}

absl::StatusOr<std::unique_ptr<SchedulerServer>> SchedulerServer::Start(
    LocalChannel* channel, SchedulerServerOptions options) {
  if (options.max_wait <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("scheduler service: max_wait must be > 0");
  }
  RETURN_IF_ERROR(options.limits.Validate("scheduler: "));
  const size_t colon = options.address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        StrCat("scheduler address \"", options.address, "\" is not host:port"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   MakeServerCredentials(options.security, options.address, "scheduler"));
  std::unique_ptr<SchedulerServer> server(new SchedulerServer());
  server->host_ = options.address.substr(0, colon);
  server->service_ = std::make_unique<SchedulerService>(
      channel, options.max_wait, options.security.auth_token, options.limits);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, credentials, &server->port_);
  builder.RegisterService(server->service_.get());
  options.limits.ApplyTo(builder, "scheduler");
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        StrCat("cannot serve the scheduler on ", options.address, " (address in use or invalid?)"));
  }
  return server;
}

std::string SchedulerServer::address() const { return StrCat(host_, ":", port_); }

void SchedulerServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // Long polls end within max_wait; give them that long.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(3));
}

SchedulerServer::~SchedulerServer() { Shutdown(); }

}  // namespace flywheel
