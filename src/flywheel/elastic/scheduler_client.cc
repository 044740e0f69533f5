#include "flywheel/elastic/scheduler_client.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/time/clock.h"
#include "flywheel/buffer/client.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/rpc/auth.h"
#include "flywheel/scheduler/micro_step_wire.h"

namespace flywheel {
namespace {

// One long poll waits at most this long on the server, so a cell's loop stays responsive.
constexpr absl::Duration kMaxPoll = absl::Seconds(1);
// The RPC's own deadline beyond the poll: transfer of a micro-step and scheduling slack.
constexpr absl::Duration kRpcSlack = absl::Seconds(10);

// A heartbeat that failed this way may succeed next time: the core was briefly unreachable or
// slow to answer.
bool IsTransient(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SchedulerClient>> SchedulerClient::Connect(
    const std::string& address, const RpcSecurity& security) {
  std::unique_ptr<SchedulerClient> client(new SchedulerClient());
  client->address_ = address;
  client->auth_token_ = security.auth_token;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);  // a micro-step of a large token budget
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  ASSIGN_OR_RETURN(client->channel_, MakeChannel(security, address, "scheduler", args));
  client->stub_ = v1::SchedulerService::NewStub(client->channel_);
  return client;
}

std::unique_ptr<grpc::ClientContext> SchedulerClient::NewContext(absl::Duration timeout) const {
  auto context = std::make_unique<grpc::ClientContext>();
  AddBearerToken(*context, auth_token_);
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
  return context;
}

int64_t SchedulerClient::PollMillis(absl::Time deadline) {
  return absl::ToInt64Milliseconds(
      std::clamp(deadline - absl::Now(), absl::ZeroDuration(), kMaxPoll));
}

std::string SchedulerClient::Describe() const { return StrCat("scheduler at ", address_); }

absl::StatusOr<v1::RegisterResponse> SchedulerClient::Register(const std::string& config_hash,
                                                               const std::string& model_hash,
                                                               const std::string& name,
                                                               absl::Duration timeout) {
  v1::RegisterRequest request;
  request.set_config_hash(config_hash);
  request.set_model_hash(model_hash);
  request.set_name(name);
  return Register(request, timeout);
}

absl::StatusOr<v1::RegisterResponse> SchedulerClient::Register(const v1::RegisterRequest& request,
                                                               absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    auto context = NewContext(std::max(deadline - absl::Now(), absl::Milliseconds(1)));
    context->set_wait_for_ready(true);  // the core may not be up yet
    v1::RegisterResponse response;
    absl::Status s = FromGrpc(stub_->Register(context.get(), request, &response),
                              StrCat("scheduler at ", address_, ": register"));
    if (s.ok()) return response;
    if (s.code() != absl::StatusCode::kUnavailable || absl::Now() >= deadline) return s;
    absl::SleepFor(absl::Milliseconds(100));
  }
}

absl::StatusOr<v1::HeartbeatResponse> SchedulerClient::Heartbeat(int cell, absl::Duration timeout) {
  v1::HeartbeatRequest request;
  request.set_cell(cell);
  return Heartbeat(request, timeout);
}

absl::StatusOr<v1::HeartbeatResponse> SchedulerClient::Heartbeat(
    const v1::HeartbeatRequest& request, absl::Duration timeout) {
  v1::HeartbeatResponse response;
  auto context = NewContext(timeout);
  RETURN_IF_ERROR(
      FromGrpc(stub_->Heartbeat(context.get(), request, &response),
               StrCat("scheduler at ", address_, ": heartbeat of cell ", request.cell())));
  return response;
}

absl::StatusOr<int64_t> SchedulerClient::Leave(int cell, int64_t step, bool exit) {
  v1::LeaveRequest request;
  request.set_cell(cell);
  request.set_step(step);
  request.set_exit(exit);
  v1::LeaveResponse response;
  auto context = NewContext(kRpcSlack);
  RETURN_IF_ERROR(FromGrpc(stub_->Leave(context.get(), request, &response),
                           StrCat("scheduler at ", address_, ": cell ", cell, " leaving",
                                  step >= 0 ? StrCat(" step ", step) : std::string())));
  return response.requeued();
}

absl::StatusOr<v1::JoinResponse> SchedulerClient::Join(int cell, int64_t step,
                                                       absl::Time deadline) {
  const std::string what =
      StrCat("scheduler at ", address_, ": cell ", cell, " joining step ", step);
  for (;;) {
    v1::JoinRequest request;
    request.set_cell(cell);
    request.set_step(step);
    request.set_wait_ms(PollMillis(deadline));
    v1::JoinResponse response;
    auto context = NewContext(kMaxPoll + kRpcSlack);
    RETURN_IF_ERROR(FromGrpc(stub_->Join(context.get(), request, &response), what));
    if (response.joined()) return response;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(StrCat(what, ": the step did not begin in time"));
    }
  }
}

absl::StatusOr<std::shared_ptr<const MicroStep>> SchedulerClient::Claim(int cell, int64_t step,
                                                                        absl::Time deadline) {
  const std::string what =
      StrCat("scheduler at ", address_, ": cell ", cell, " claiming in step ", step);
  for (;;) {
    v1::ClaimRequest request;
    request.set_cell(cell);
    request.set_step(step);
    request.set_wait_ms(PollMillis(deadline));
    v1::ClaimResponse response;
    auto context = NewContext(kMaxPoll + kRpcSlack);
    RETURN_IF_ERROR(FromGrpc(stub_->Claim(context.get(), request, &response), what));
    switch (response.outcome()) {
      case v1::ClaimResponse::MICRO_STEP: {
        ASSIGN_OR_RETURN(MicroStep ms, MicroStepFromWire(response.micro_step()));
        return std::make_shared<const MicroStep>(std::move(ms));
      }
      case v1::ClaimResponse::NONE_LEFT:
        return std::shared_ptr<const MicroStep>();
      case v1::ClaimResponse::NOT_YET:
        if (absl::Now() >= deadline) {
          return absl::DeadlineExceededError(StrCat(what, ": no micro-step by the deadline"));
        }
        break;
      default:
        return absl::InternalError(StrCat(what, ": unknown outcome ", response.outcome()));
    }
  }
}

absl::Status SchedulerClient::Done(int cell, int64_t step, int64_t id) {
  v1::DoneRequest request;
  request.set_cell(cell);
  request.set_step(step);
  request.set_id(id);
  v1::DoneResponse response;
  auto context = NewContext(kRpcSlack);
  return FromGrpc(stub_->Done(context.get(), request, &response),
                  StrCat("scheduler at ", address_, ": cell ", cell, " done with micro-step ", id,
                         " of step ", step));
}

absl::StatusOr<StepParticipants> SchedulerClient::AwaitParticipants(int cell, int64_t step,
                                                                    absl::Time deadline) {
  const std::string what = StrCat("scheduler at ", address_, ": cell ", cell,
                                  " awaiting the participants of step ", step);
  for (;;) {
    v1::AwaitParticipantsRequest request;
    request.set_cell(cell);
    request.set_step(step);
    request.set_wait_ms(PollMillis(deadline));
    v1::AwaitParticipantsResponse response;
    auto context = NewContext(kMaxPoll + kRpcSlack);
    RETURN_IF_ERROR(FromGrpc(stub_->AwaitParticipants(context.get(), request, &response), what));
    if (response.ready()) {
      StepParticipants participants;
      participants.step = response.step();
      participants.epoch = response.epoch();
      participants.cells.assign(response.cells().begin(), response.cells().end());
      participants.normaliser = response.normaliser();
      return participants;
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(StrCat(what, ": the step did not complete in time"));
    }
  }
}

HeartbeatSender::HeartbeatSender(CellChannel* channel, int cell, absl::Duration interval,
                                 Report report)
    : channel_(channel),
      cell_(cell),
      interval_(interval),
      report_(std::move(report)),
      latest_(absl::UnavailableError("no heartbeat answered yet")) {
  thread_ = std::thread([this] { Run(); });
}

HeartbeatSender::~HeartbeatSender() { Stop(); }

void HeartbeatSender::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void HeartbeatSender::Poke() {
  absl::MutexLock lock(&mu_);
  poked_ = true;
}

void HeartbeatSender::Run() {
  for (;;) {
    {
      // A Poke from here on asks for the heartbeat after this one: it reports newer news.
      absl::MutexLock lock(&mu_);
      poked_ = false;
    }
    v1::HeartbeatRequest request;
    if (report_) report_(request);
    request.set_cell(cell_);
    // A reply may be slow on a loaded core; the service's timeout is what declares a death.
    absl::StatusOr<v1::HeartbeatResponse> reply =
        channel_->Heartbeat(request, std::max(interval_ * 4, absl::Seconds(5)));
    absl::MutexLock lock(&mu_);
    if (reply.ok() && reply->finished()) finished_ = true;
    latest_ = std::move(reply);
    ++sent_;
    auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || poked_; };
    mu_.AwaitWithTimeout(absl::Condition(&wake), interval_);
    if (stopping_) return;
  }
}

absl::StatusOr<v1::HeartbeatResponse> HeartbeatSender::latest() const {
  absl::MutexLock lock(&mu_);
  return latest_;
}

bool HeartbeatSender::AwaitFinished(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&finished_), timeout);
}

int64_t HeartbeatSender::AwaitReply(int64_t seen, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto newer = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return sent_ > seen || stopping_; };
  mu_.AwaitWithDeadline(absl::Condition(&newer), deadline);
  return sent_;
}

int64_t HeartbeatSender::sent() const {
  absl::MutexLock lock(&mu_);
  return sent_;
}

absl::StatusOr<v1::HeartbeatResponse> HeartbeatSender::AwaitRole(v1::CellRole role,
                                                                 int64_t min_step,
                                                                 absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto reached = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!latest_.ok()) return !IsTransient(latest_.status());
    return latest_->finished() || (latest_->role() == role && latest_->step() >= min_step);
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&reached), deadline)) {
    return absl::DeadlineExceededError(
        StrCat("cell ", cell_, ": no heartbeat reply with role ", v1::CellRole_Name(role),
               " at step >= ", min_step, " in time (latest: ",
               latest_.ok() ? latest_->ShortDebugString() : latest_.status().ToString(), ")"));
  }
  return latest_;
}

}  // namespace flywheel
