#include "flywheel/elastic/scheduler_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "flywheel/rpc/auth.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/scheduler/micro_step_wire.h"

namespace flywheel {
namespace {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(status.code())),
                      StrCat("scheduler: ", status.message()));
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

absl::Status SchedulerServiceOptions::Validate() const {
  if (config_hash.empty() || model_hash.empty()) {
    return absl::InvalidArgumentError(
        "scheduler service: config_hash and model_hash must be set (cells are checked against "
        "them)");
  }
  if (heartbeat_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("scheduler service: heartbeat_interval must be > 0");
  }
  if (heartbeat_timeout < 2 * heartbeat_interval) {
    return absl::InvalidArgumentError(
        StrCat("scheduler service: heartbeat_timeout (", Seconds(heartbeat_timeout),
               " s) must cover two heartbeats (interval ", Seconds(heartbeat_interval), " s)"));
  }
  if (max_wait <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("scheduler service: max_wait must be > 0");
  }
  if (core_cell < 0) return absl::InvalidArgumentError("scheduler service: core_cell < 0");
  return absl::OkStatus();
}

SchedulerService::SchedulerService(MicroStepQueue* queue, SchedulerServiceOptions options,
                                   std::string auth_token, const ServerLimits& limits)
    : queue_(queue),
      options_(std::move(options)),
      auth_token_(std::move(auth_token)),
      limiter_("scheduler", limits),
      init_status_(options_.Validate()),
      next_cell_(options_.core_cell + 1) {
  if (init_status_.ok()) monitor_ = std::thread([this] { Monitor(); });
}

SchedulerService::~SchedulerService() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (monitor_.joinable()) monitor_.join();
}

absl::Status SchedulerService::BeginStep(int64_t step, int64_t version, int64_t optimizer_step) {
  RETURN_IF_ERROR(init_status_);
  // Under mu_, so that a heartbeat never pairs the new step with a role set for the old one.
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(queue_->BeginStep(step, version));
  step_ = step;
  version_ = version;
  optimizer_step_ = optimizer_step;
  return absl::OkStatus();
}

absl::Status SchedulerService::SetRole(int cell, v1::CellRole role) {
  absl::MutexLock lock(&mu_);
  auto it = cells_.find(cell);
  if (it == cells_.end()) {
    return absl::NotFoundError(StrCat("scheduler: no cell ", cell, " registered"));
  }
  it->second.role = role;
  return absl::OkStatus();
}

absl::Status SchedulerService::SetAdmission(int cell, int64_t admit_until, int64_t admit_version) {
  absl::MutexLock lock(&mu_);
  auto it = cells_.find(cell);
  if (it == cells_.end()) {
    return absl::NotFoundError(StrCat("scheduler: no cell ", cell, " registered"));
  }
  it->second.admit_until = admit_until;
  it->second.admit_version = admit_version;
  return absl::OkStatus();
}

void SchedulerService::SetFinished() {
  absl::MutexLock lock(&mu_);
  finished_ = true;
}

std::vector<CellInfo> SchedulerService::cells() const {
  absl::MutexLock lock(&mu_);
  std::vector<CellInfo> out;
  for (const auto& [id, cell] : cells_) out.push_back(cell);
  return out;
}

absl::Status SchedulerService::AwaitDead(int cell, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto dead = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = cells_.find(cell);
    return it != cells_.end() && it->second.dead;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&dead), deadline)) {
    return absl::DeadlineExceededError(StrCat("scheduler: cell ", cell, " is still alive"));
  }
  return absl::OkStatus();
}

absl::Status SchedulerService::AwaitRegistered(int count, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto registered = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(cells_.size()) >= count;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&registered), deadline)) {
    return absl::DeadlineExceededError(
        StrCat("scheduler: ", cells_.size(), " of ", count, " cells registered"));
  }
  return absl::OkStatus();
}

void SchedulerService::Monitor() {
  const absl::Duration tick = options_.heartbeat_interval / 2;
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick)) {
    const absl::Time now = absl::Now();
    for (auto& [id, cell] : cells_) {
      const absl::Duration silent = now - cell.last_seen;
      if (!cell.dead && silent > options_.heartbeat_timeout) DeclareDead(cell, silent);
    }
  }
}

void SchedulerService::DeclareDead(CellInfo& cell, absl::Duration silent) {
  cell.dead = true;
  absl::StatusOr<int64_t> requeued =
      step_ >= 0 ? queue_->Requeue(cell.cell) : absl::StatusOr<int64_t>(0);
  if (cell.left) {
    spdlog::info("scheduler: cell {} ({}) left; {} micro-steps re-queued", cell.cell, cell.name,
                 requeued.value_or(0));
    if (requeued.ok()) cell.requeued = *requeued;
    return;
  }
  if (requeued.ok()) {
    cell.requeued = *requeued;
    spdlog::warn(
        "scheduler: cell {} ({}) sent nothing for {:.2f} s (heartbeat_timeout {:.2f} s): declared "
        "dead, {} micro-steps of step {} re-queued",
        cell.cell, cell.name, Seconds(silent), Seconds(options_.heartbeat_timeout), *requeued,
        step_);
  } else {
    spdlog::warn("scheduler: cell {} ({}) sent nothing for {:.2f} s: declared dead ({})", cell.cell,
                 cell.name, Seconds(silent), requeued.status().message());
  }
}

absl::Status SchedulerService::CheckCall(const grpc::ServerContext* context, int cell) {
  if (grpc::Status s = CheckBearerToken(context, auth_token_, "scheduler"); !s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  }
  RETURN_IF_ERROR(init_status_);
  absl::MutexLock lock(&mu_);
  auto it = cells_.find(cell);
  if (it == cells_.end()) {
    return absl::NotFoundError(
        StrCat("unknown cell ", cell, ": call Register first (it hands out the cell ids)"));
  }
  if (it->second.dead) {
    return absl::FailedPreconditionError(StrCat(
        "cell ", cell, " was declared dead (no heartbeat for ", Seconds(options_.heartbeat_timeout),
        " s) and its micro-steps re-queued; register again as a new cell"));
  }
  it->second.last_seen = absl::Now();
  return absl::OkStatus();
}

absl::Status SchedulerService::CheckStep(int cell, int64_t step, const char* what) const {
  if (step == step_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      StrCat("cell ", cell, " ", what, " step ", step, " but the current step is ", step_));
}

absl::Time SchedulerService::WaitDeadline(int64_t wait_ms) const {
  return absl::Now() +
         std::clamp(absl::Milliseconds(wait_ms), absl::ZeroDuration(), options_.max_wait);
}

grpc::Status SchedulerService::Register(grpc::ServerContext* context,
                                        const v1::RegisterRequest* request,
                                        v1::RegisterResponse* response) {
  CallSlot slot = limiter_.Admit(context, CallKind::kUnary);
  if (!slot.admitted()) return slot.refusal();
  if (grpc::Status s = CheckBearerToken(context, auth_token_, "scheduler"); !s.ok()) {
    return s;
  }
  if (!init_status_.ok()) return ToGrpc(init_status_);
  const std::string name = request->name().empty() ? context->peer() : request->name();
  std::vector<std::string> mismatches;
  if (request->config_hash() != options_.config_hash) {
    mismatches.push_back(StrCat("its config hash '", request->config_hash(),
                                "' differs from the core's '", options_.config_hash,
                                "': start it with the core's config file and --set overrides"));
  }
  if (request->model_hash() != options_.model_hash) {
    mismatches.push_back(StrCat("its model hash '", request->model_hash(),
                                "' differs from the core's '", options_.model_hash,
                                "': give it the core's model (model.* keys, checkpoint)"));
  }
  if (!mismatches.empty()) {
    return ToGrpc(absl::FailedPreconditionError(
        StrCat("cell ", name, " refused: ", flywheel::Join(mismatches, "; and "))));
  }
  absl::MutexLock lock(&mu_);
  CellInfo cell;
  cell.cell = next_cell_++;
  cell.name = name;
  cell.last_seen = absl::Now();
  cells_[cell.cell] = cell;
  spdlog::info("scheduler: cell {} registered ({})", cell.cell, name);
  response->set_cell(cell.cell);
  response->set_core_cell(options_.core_cell);
  response->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  response->set_heartbeat_timeout_ms(absl::ToInt64Milliseconds(options_.heartbeat_timeout));
  response->set_store_address(options_.store_address);
  response->set_weights_address(options_.weights_address);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Heartbeat(grpc::ServerContext* context,
                                         const v1::HeartbeatRequest* request,
                                         v1::HeartbeatResponse* response) {
  CallSlot slot = limiter_.Admit(context, CallKind::kUnary);
  if (!slot.admitted()) return slot.refusal();
  if (absl::Status s = CheckCall(context, request->cell()); !s.ok()) return ToGrpc(s);
  if (request->dispatched() < 0 || request->finished() < 0 ||
      request->finished() > request->dispatched()) {
    return ToGrpc(absl::InvalidArgumentError(
        StrCat("cell ", request->cell(), " reports ", request->finished(), " of ",
               request->dispatched(), " episodes finished: counts must be 0 <= finished <= "
               "dispatched")));
  }
  absl::MutexLock lock(&mu_);
  CellInfo& cell = cells_.at(request->cell());
  cell.reported_role = request->role();
  // Counts only grow: a reply reordered behind a newer one must not take admission back.
  cell.dispatched = std::max(cell.dispatched, request->dispatched());
  cell.finished = std::max(cell.finished, request->finished());
  cell.weights_version = request->weights_version();
  cell.remaining_tokens = std::isfinite(request->remaining_tokens())
                              ? std::max(0.0, request->remaining_tokens())
                              : 0.0;
  response->set_role(cell.role);
  response->set_step(step_);
  response->set_finished(finished_);
  response->set_admit_until(cell.admit_until);
  response->set_admit_version(cell.admit_version);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Join(grpc::ServerContext* context, const v1::JoinRequest* request,
                                    v1::JoinResponse* response) {
  CallSlot slot = limiter_.Admit(context, CallKind::kUnary);
  if (!slot.admitted()) return slot.refusal();
  const int cell = request->cell();
  if (absl::Status s = CheckCall(context, cell); !s.ok()) return ToGrpc(s);
  absl::Status begun = queue_->AwaitStep(request->step(), WaitDeadline(request->wait_ms()));
  if (begun.code() == absl::StatusCode::kDeadlineExceeded) {
    response->set_joined(false);
    return grpc::Status::OK;
  }
  if (!begun.ok()) return ToGrpc(begun);
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckStep(cell, request->step(), "joins"); !s.ok()) return ToGrpc(s);
  if (absl::Status s = queue_->Join(cell, request->step()); !s.ok()) return ToGrpc(s);
  response->set_joined(true);
  response->set_version(version_);
  response->set_optimizer_step(optimizer_step_);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Claim(grpc::ServerContext* context, const v1::ClaimRequest* request,
                                     v1::ClaimResponse* response) {
  CallSlot slot = limiter_.Admit(context, CallKind::kUnary);
  if (!slot.admitted()) return slot.refusal();
  const int cell = request->cell();
  const int64_t step = request->step();
  if (absl::Status s = CheckCall(context, cell); !s.ok()) return ToGrpc(s);
  // A step that has completed (and was followed by the next) has nothing left for anybody.
  auto step_over = [&] {
    absl::MutexLock lock(&mu_);
    return step < step_;
  };
  {
    absl::MutexLock lock(&mu_);
    if (step > step_) return ToGrpc(CheckStep(cell, step, "claims in"));
    if (step < step_) {
      response->set_outcome(v1::ClaimResponse::NONE_LEFT);
      return grpc::Status::OK;
    }
  }
  absl::StatusOr<std::shared_ptr<const MicroStep>> ms =
      queue_->Claim(cell, WaitDeadline(request->wait_ms()));
  if (ms.status().code() == absl::StatusCode::kDeadlineExceeded) {
    response->set_outcome(v1::ClaimResponse::NOT_YET);
    return grpc::Status::OK;
  }
  if (!ms.ok()) {
    // The step completed and the next began between the check and the claim.
    if (step_over()) {
      response->set_outcome(v1::ClaimResponse::NONE_LEFT);
      return grpc::Status::OK;
    }
    return ToGrpc(ms.status());
  }
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
  if (!slot.admitted()) return slot.refusal();
  const int cell = request->cell();
  if (absl::Status s = CheckCall(context, cell); !s.ok()) return ToGrpc(s);
  absl::MutexLock lock(&mu_);  // the step cannot change under the Done
  if (absl::Status s = CheckStep(cell, request->step(), "reports a micro-step of"); !s.ok()) {
    return ToGrpc(s);
  }
  return ToGrpc(queue_->Done(cell, request->id()));
}

grpc::Status SchedulerService::AwaitParticipants(grpc::ServerContext* context,
                                                 const v1::AwaitParticipantsRequest* request,
                                                 v1::AwaitParticipantsResponse* response) {
  CallSlot slot = limiter_.Admit(context, CallKind::kUnary);
  if (!slot.admitted()) return slot.refusal();
  const int cell = request->cell();
  if (absl::Status s = CheckCall(context, cell); !s.ok()) return ToGrpc(s);
  absl::StatusOr<StepParticipants> participants =
      queue_->AwaitParticipants(request->step(), WaitDeadline(request->wait_ms()));
  if (participants.status().code() == absl::StatusCode::kDeadlineExceeded) {
    response->set_ready(false);
    return grpc::Status::OK;
  }
  if (!participants.ok()) return ToGrpc(participants.status());
  if (std::find(participants->cells.begin(), participants->cells.end(), cell) ==
      participants->cells.end()) {
    return ToGrpc(absl::FailedPreconditionError(
        StrCat("cell ", cell, " is not a participant of step ", request->step(), " (they are ",
               flywheel::Join(participants->cells, ", "), ")")));
  }
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
  if (!slot.admitted()) return slot.refusal();
  const int cell = request->cell();
  if (absl::Status s = CheckCall(context, cell); !s.ok()) return ToGrpc(s);
  absl::MutexLock lock(&mu_);
  if (request->exit()) {
    // As a death, without the wait: whatever it claimed in the current step goes back.
    CellInfo& info = cells_.at(cell);
    info.left = true;
    DeclareDead(info, absl::ZeroDuration());
    response->set_requeued(info.requeued);
    return grpc::Status::OK;
  }
  if (request->step() >= 0) {
    if (absl::Status s = CheckStep(cell, request->step(), "leaves"); !s.ok()) return ToGrpc(s);
    // Its gradient will be in no reduce: every claim goes back, done or not (a cell without
    // claims may join the step again). Fails once the step is complete: the cell is a
    // participant and must reduce it.
    absl::StatusOr<int64_t> requeued = queue_->Leave(cell);
    if (!requeued.ok()) return ToGrpc(requeued.status());
    response->set_requeued(*requeued);
  }
  return grpc::Status::OK;
}

absl::StatusOr<std::unique_ptr<SchedulerServer>> SchedulerServer::Start(
    MicroStepQueue* queue, SchedulerServerOptions options) {
  RETURN_IF_ERROR(options.service.Validate());
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
      queue, options.service, options.security.auth_token, options.limits);
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
