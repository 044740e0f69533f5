#include "flywheel/rpc/server_limits.h"

#include <grpcpp/resource_quota.h>

#include <algorithm>
#include <climits>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

// gRPC's sync server takes a thread per call in a handler, plus its pollers. The thread quota
// sits this far above max_concurrent_calls, so that CallLimiter (which counts and logs) refuses
// first and gRPC's own refusal ("Server Threadpool Exhausted", not counted) stays a backstop.
constexpr int kThreadHeadroom = 64;

int Millis(absl::Duration d) {
  return static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 1, INT_MAX));
}

}  // namespace

absl::Status ServerLimits::Validate(std::string_view prefix) const {
  auto error = [&](auto... parts) { return absl::InvalidArgumentError(StrCat(prefix, parts...)); };
  if (max_message_bytes < 1024 || max_message_bytes > INT_MAX) {
    return error("max_message_bytes must be in [1024, ", INT_MAX, "] (got ", max_message_bytes,
                 ")");
  }
  // gRPC resets streams that push its buffers past the quota: a quota of a few messages would
  // reset ordinary traffic.
  if (memory_quota_bytes < 4 * max_message_bytes) {
    return error("memory_quota_bytes (", memory_quota_bytes, ") must be at least 4 x ", prefix,
                 "max_message_bytes (", 4 * max_message_bytes,
                 "): gRPC resets streams once its buffers reach the quota");
  }
  if (max_streams_per_connection < 1) {
    return error("max_streams_per_connection must be >= 1 (got ", max_streams_per_connection, ")");
  }
  if (max_concurrent_calls < 1 || max_concurrent_calls > INT_MAX - kThreadHeadroom) {
    return error("max_concurrent_calls must be >= 1 (got ", max_concurrent_calls, ")");
  }
  if (idle_timeout <= absl::ZeroDuration()) return error("idle_timeout_s must be > 0");
  if (keepalive_time <= absl::ZeroDuration() || keepalive_timeout <= absl::ZeroDuration()) {
    return error("keepalive times must be > 0");
  }
  return absl::OkStatus();
}

void ServerLimits::ApplyTo(grpc::ServerBuilder& builder, const std::string& name,
                           MessageSizeCheck check) const {
  // Only what comes in is limited: what goes out the server built itself (a scheduler's
  // micro-step may be larger than anything a client sends it).
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      check == MessageSizeCheck::kByGrpc ? max_message_bytes
                                         : std::min<int64_t>(memory_quota_bytes, INT_MAX)));
  grpc::ResourceQuota quota(StrCat("flywheel ", name));
  quota.Resize(static_cast<size_t>(memory_quota_bytes));
  quota.SetMaxThreads(max_concurrent_calls + kThreadHeadroom);
  builder.SetResourceQuota(quota);  // the builder keeps its own reference
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, max_streams_per_connection);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, Millis(keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Millis(keepalive_timeout));
  // Keep pinging a connection that carries no data: an idle peer that vanished is found too.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

std::string ServerLimits::DebugString() const {
  return StrCat("max_message_bytes=", max_message_bytes, " memory_quota_bytes=", memory_quota_bytes,
                " max_streams_per_connection=", max_streams_per_connection,
                " max_concurrent_calls=", max_concurrent_calls,
                " idle_timeout=", absl::FormatDuration(idle_timeout));
}

}  // namespace flywheel
