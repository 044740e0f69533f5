#include "flywheel/rpc/call_limiter.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "flywheel/core/strings.h"

namespace flywheel {

struct CallSlot::State {
  grpc::ServerContext* context = nullptr;  // the handler's; valid while the slot exists
  std::string peer;                        // for logs (gRPC forgets it once a call is cancelled)
  CallKind kind = CallKind::kStream;
  std::atomic<int64_t> last_progress_ns{0};  // admitted, received, wrote, or answered
  std::atomic<int64_t> writing_since_ns{0};  // 0: no Write pending
  std::atomic<int64_t> owed{0};              // requests taken and not yet answered
  bool cancelled = false;                    // by the watchdog; guarded by the limiter's mu_
};

namespace {

constexpr absl::Duration kLogEvery = absl::Seconds(1);

std::string RefusedMetric(std::string_view service, std::string_view reason) {
  return StrCat("rpc.refused{service=", service, ",reason=", reason, "}");
}
constexpr std::string_view kRefusedHelp =
    "calls a gRPC server refused or cut off to stay within its bounds: too_many_calls "
    "(max_concurrent_calls), idle (a stream that waited on its client for idle_timeout), "
    "message_too_large (a message above max_message_bytes)";

}  // namespace

CallSlot::CallSlot(CallLimiter* limiter, std::shared_ptr<State> state, grpc::Status refusal)
    : limiter_(limiter), state_(std::move(state)), refusal_(std::move(refusal)) {}

CallSlot::~CallSlot() {
  if (state_ != nullptr) limiter_->Release(state_);
}

void CallSlot::Received() {
  if (state_ != nullptr) state_->last_progress_ns.store(absl::GetCurrentTimeNanos());
}

void CallSlot::Owe(int64_t n) {
  if (state_ == nullptr) return;
  state_->owed.fetch_add(n);
  state_->last_progress_ns.store(absl::GetCurrentTimeNanos());
}

grpc::Status CallSlot::RefuseIfTooLarge(int64_t bytes) {
  const int64_t limit = limiter_->limits_.max_message_bytes;
  if (bytes <= limit) return grpc::Status::OK;
  limiter_->message_too_large_->Increment();
  const std::string what = StrCat("a message of ", bytes, " bytes, above ", limiter_->knob_prefix_,
                                  "max_message_bytes (", limit, ")");
  {
    absl::MutexLock lock(&limiter_->mu_);
    limiter_->LogRefusalLocked("message_too_large",
                               StrCat(what, " from ", state_ != nullptr ? state_->peer : "?"));
  }
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      StrCat(limiter_->service_, ": refused ", what,
                             ": send less per message, or raise the limit on the server"));
}

CallSlot::PendingWrite::PendingWrite(CallSlot* slot) : slot_(slot) {
  if (slot_->state_ != nullptr) {
    slot_->state_->writing_since_ns.store(absl::GetCurrentTimeNanos());
  }
}

CallSlot::PendingWrite::~PendingWrite() {
  if (slot_->state_ == nullptr) return;
  slot_->state_->writing_since_ns.store(0);
  slot_->state_->last_progress_ns.store(absl::GetCurrentTimeNanos());
}

CallLimiter::CallLimiter(std::string service, const ServerLimits& limits, std::string knob_prefix)
    : service_(std::move(service)),
      limits_(limits),
      knob_prefix_(std::move(knob_prefix)),
      too_many_calls_(MetricsRegistry::Global().GetCounter(
          RefusedMetric(service_, "too_many_calls"), kRefusedHelp)),
      idle_(MetricsRegistry::Global().GetCounter(RefusedMetric(service_, "idle"), kRefusedHelp)),
      message_too_large_(MetricsRegistry::Global().GetCounter(
          RefusedMetric(service_, "message_too_large"), kRefusedHelp)),
      active_gauge_(MetricsRegistry::Global().GetGauge(
          StrCat("rpc.active_calls{service=", service_, "}"),
          "calls in a gRPC server's handlers (at most its max_concurrent_calls)")) {
  watchdog_ = std::thread([this] { Watch(); });
}

CallLimiter::~CallLimiter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  watchdog_.join();
}

CallSlot CallLimiter::Admit(grpc::ServerContext* context, CallKind kind) {
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(active_.size()) >= limits_.max_concurrent_calls) {
    too_many_calls_->Increment();
    LogRefusalLocked("too_many_calls", StrCat("a call from ", context->peer()));
    return CallSlot(
        this, nullptr,
        grpc::Status(grpc::StatusCode::UNAVAILABLE,
                     StrCat(service_, ": busy with ", limits_.max_concurrent_calls, " calls, its ",
                            knob_prefix_, "max_concurrent_calls; try again shortly")));
  }
  auto state = std::make_shared<CallSlot::State>();
  state->context = context;
  state->peer = context->peer();
  state->kind = kind;
  state->last_progress_ns.store(absl::GetCurrentTimeNanos());
  active_.emplace(state.get(), state);
  active_gauge_->Set(static_cast<double>(active_.size()));
  return CallSlot(this, std::move(state), grpc::Status::OK);
}

void CallLimiter::Release(const std::shared_ptr<CallSlot::State>& state) {
  absl::MutexLock lock(&mu_);
  active_.erase(state.get());
  active_gauge_->Set(static_cast<double>(active_.size()));
}

int CallLimiter::active_calls() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(active_.size());
}

int64_t CallLimiter::refused(std::string_view reason) const {
  if (reason == "too_many_calls") return too_many_calls_->value();
  if (reason == "idle") return idle_->value();
  if (reason == "message_too_large") return message_too_large_->value();
  return 0;
}

void CallLimiter::LogRefusalLocked(std::string_view reason, const std::string& detail) {
  auto [it, inserted] = log_.try_emplace(std::string(reason), absl::InfinitePast(), 0);
  auto& [last, held_back] = it->second;
  const absl::Time now = absl::Now();
  if (now - last < kLogEvery) {
    ++held_back;
    return;
  }
  spdlog::warn("{}: refused ({}): {}{}", service_, reason, detail,
               held_back > 0 ? StrCat(" (and ", held_back, " more since the last line)") : "");
  last = now;
  held_back = 0;
}

void CallLimiter::Watch() {
  const absl::Duration period = std::min(limits_.idle_timeout / 4, absl::Seconds(1));
  const int64_t timeout_ns = absl::ToInt64Nanoseconds(limits_.idle_timeout);
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), period)) {
    const int64_t now = absl::GetCurrentTimeNanos();
    for (auto& [key, state] : active_) {
      if (state->kind != CallKind::kStream || state->cancelled) continue;
      const int64_t writing_since = state->writing_since_ns.load();
      const bool idle = writing_since != 0 ? now - writing_since >= timeout_ns
                                           : state->owed.load() <= 0 &&
                                                 now - state->last_progress_ns.load() >= timeout_ns;
      if (!idle) continue;
      state->cancelled = true;
      state->context->TryCancel();
      idle_->Increment();
      LogRefusalLocked("idle",
                       StrCat("a stream from ", state->peer,
                              writing_since != 0 ? " that did not read what was written to it"
                                                 : " that sent nothing",
                              " for ", absl::FormatDuration(limits_.idle_timeout), ", cancelled"));
    }
  }
}

}  // namespace flywheel
