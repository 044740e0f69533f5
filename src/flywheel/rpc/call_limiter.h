// Admission of calls into one gRPC server's handlers, and the watchdog over streams that wait on
// their client. What it refuses is counted in the metrics registry as
// rpc.refused{service=<service>,reason=<reason>} (flywheel_rpc_refused_total on /metrics) and
// logged, at most once a second per reason:
//
//   too_many_calls     a call beyond ServerLimits::max_concurrent_calls: UNAVAILABLE at once
//   idle               a stream that waited on its client for ServerLimits::idle_timeout:
//                      cancelled (its handler's Read or Write returns false)
//   message_too_large  a message above max_message_bytes that the handler refused
//                      (CallSlot::RefuseIfTooLarge): RESOURCE_EXHAUSTED, naming the knob
//
// gRPC's own receive limit refuses a larger message without telling the handler why its Read
// failed (IsCancelled() is not even reliably set), so a service that wants such messages
// counted sets gRPC's limit above max_message_bytes (ServerLimits::ApplyTo's
// transport_receive_limit) and refuses them itself.
//
//   handler                              watchdog thread (every idle_timeout / 4, at most 1 s)
//   slot = limiter.Admit(context, kind)  for each admitted stream: a Write pending for
//   slot.Received() after each Read        idle_timeout, or nothing pending, nothing owed and
//   slot.Owe(±n) as requests are taken     nothing received for idle_timeout
//     and answered                           ─▶ context->TryCancel()
//   { auto w = slot.Writing(); Write(); }
//   ~CallSlot: the slot is free again
//
// A stream is waiting on its client when the server owes it nothing (every request it read is
// answered) and it sends nothing, or when the client does not read what the server writes. Time
// the server spends on the client's behalf (an insert waiting for room in a full buffer) never
// counts. Thread-safe; a CallSlot belongs to its handler's threads and must be destroyed before
// the handler returns (its context is gone after that). Lock order: mu_ only.
#ifndef FLYWHEEL_RPC_CALL_LIMITER_H_
#define FLYWHEEL_RPC_CALL_LIMITER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/core/metrics.h"
#include "flywheel/rpc/server_limits.h"

namespace flywheel {

class CallLimiter;

enum class CallKind {
  kUnary,   // answered as soon as the handler returns: never idle
  kStream,  // watched for idleness
};

// One admitted call's slot (or the refusal, when not admitted).
class CallSlot {
 public:
  CallSlot(CallSlot&&) = default;
  CallSlot& operator=(CallSlot&&) = delete;
  ~CallSlot();

  bool admitted() const { return state_ != nullptr; }
  // The status to return when not admitted.
  const grpc::Status& refusal() const { return refusal_; }

  // A message arrived from the client.
  void Received();
  // The server took on (n > 0) or answered (n < 0) n requests.
  void Owe(int64_t n);
  // OK when a message of `bytes` is within max_message_bytes; otherwise counts
  // message_too_large, logs, and returns the RESOURCE_EXHAUSTED status to end the call with.
  grpc::Status RefuseIfTooLarge(int64_t bytes);

  // Marks a Write in progress for as long as it lives.
  class PendingWrite {
   public:
    explicit PendingWrite(CallSlot* slot);
    PendingWrite(const PendingWrite&) = delete;
    PendingWrite& operator=(const PendingWrite&) = delete;
    ~PendingWrite();

   private:
    CallSlot* const slot_;
  };
  PendingWrite Writing() { return PendingWrite(this); }

  struct State;  // shared with the watchdog

 private:
  friend class CallLimiter;
  CallSlot(CallLimiter* limiter, std::shared_ptr<State> state, grpc::Status refusal);

  CallLimiter* limiter_;  // borrowed; outlives the slot
  std::shared_ptr<State> state_;
  grpc::Status refusal_;
};

class CallLimiter {
 public:
  // `service` names it in logs and metrics ("buffer", "weights", "scheduler"); refusals name
  // the knobs with `knob_prefix` in front ("buffer." gives buffer.max_concurrent_calls).
  CallLimiter(std::string service, const ServerLimits& limits, std::string knob_prefix = "");
  ~CallLimiter();  // stops the watchdog; every slot must be gone

  CallSlot Admit(grpc::ServerContext* context, CallKind kind);

  int active_calls() const;
  int64_t refused(std::string_view reason) const;

 private:
  friend class CallSlot;
  void Release(const std::shared_ptr<CallSlot::State>& state);
  // Logs a refusal, or holds the line back when this reason was logged less than 1 s ago.
  void LogRefusalLocked(std::string_view reason, const std::string& detail)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Watch();

  const std::string service_;
  const ServerLimits limits_;
  const std::string knob_prefix_;
  Counter* const too_many_calls_;
  Counter* const idle_;
  Counter* const message_too_large_;
  Gauge* const active_gauge_;

  mutable absl::Mutex mu_;
  std::map<CallSlot::State*, std::shared_ptr<CallSlot::State>> active_ ABSL_GUARDED_BY(mu_);
  // Log lines held back per reason (at most one line a second each).
  std::map<std::string, std::pair<absl::Time, int64_t>, std::less<>> log_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watchdog_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_RPC_CALL_LIMITER_H_
