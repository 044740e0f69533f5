// What one flywheel gRPC server may be made to hold, whatever its clients send or fail to read
// (docs/reliability.md, "Bounds"). Each limit is gRPC's own where gRPC has one:
//
//   limit                         enforced by                       past it
//   max_message_bytes             gRPC's receive limit, or the      RESOURCE_EXHAUSTED (counted
//                                 handler (MessageSizeCheck)        when the handler refuses it)
//   memory_quota_bytes            gRPC's ResourceQuota: every       gRPC resets the stream that
//                                 connection's read/write buffers   grows it (RESOURCE_EXHAUSTED)
//   max_streams_per_connection    HTTP/2 SETTINGS_MAX_CONCURRENT_   the client's further streams
//                                 STREAMS                           wait on the client
//   max_concurrent_calls          CallLimiter (call_limiter.h);     UNAVAILABLE: retry later
//                                 gRPC's thread quota a little
//                                 above it as a backstop
//   idle_timeout                  CallLimiter's watchdog            the stream is cancelled
//   keepalive_time (+ _timeout)   gRPC's keepalive pings            a vanished peer's connection
//                                                                   and its calls are closed
//
// So a server holds at most memory_quota_bytes in gRPC's buffers plus, per call in a handler,
// what its handler keeps (one message as parsed, and whatever the service queues: the buffer's
// insert stream documents its own bound).
#ifndef FLYWHEEL_RPC_SERVER_LIMITS_H_
#define FLYWHEEL_RPC_SERVER_LIMITS_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace flywheel {

// Who refuses a message above max_message_bytes. gRPC refuses it without telling the handler
// (nothing to count, a status that names no knob); a handler that checks sizes itself
// (CallSlot::RefuseIfTooLarge) counts it and names the knob, and gRPC's own limit is then the
// memory quota: a message the quota cannot hold is reset by gRPC while it arrives.
enum class MessageSizeCheck { kByGrpc, kByHandler };

struct ServerLimits {
  int64_t max_message_bytes = 64 << 20;
  int64_t memory_quota_bytes = int64_t{1} << 30;
  int max_streams_per_connection = 100;
  int max_concurrent_calls = 1024;
  // A stream whose client sends nothing while the server owes it nothing, or does not read
  // what the server writes, for this long is cancelled.
  absl::Duration idle_timeout = absl::Seconds(60);
  absl::Duration keepalive_time = absl::Seconds(60);
  absl::Duration keepalive_timeout = absl::Seconds(20);

  // `prefix` is how errors name the knobs ("buffer." gives buffer.max_concurrent_calls).
  absl::Status Validate(std::string_view prefix) const;
  // Sets the receive message size, the ResourceQuota (memory and threads), the streams per
  // connection and keepalive on `builder`. `name` names the quota ("buffer").
  void ApplyTo(grpc::ServerBuilder& builder, const std::string& name,
               MessageSizeCheck check = MessageSizeCheck::kByGrpc) const;
  std::string DebugString() const;
};

}  // namespace flywheel

#endif  // FLYWHEEL_RPC_SERVER_LIMITS_H_
