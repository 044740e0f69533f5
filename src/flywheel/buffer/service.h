// The buffer's gRPC service (proto/flywheel/v1/buffer_service.proto) and the server that hosts
// it for `flywheel serve buffer`.
//
//   Insert stream:  handler thread reads requests ─▶ queue ─▶ stream worker: decode, Validate,
//                   Buffer::InsertBatch (one synced write for what queued up) ─▶ acks
//   Sample stream:  one batch per request, wire bytes sent as stored (no re-serialisation);
//                   leased to the request's lease_owner when it names one
//   Acknowledge:    a learner's consumed (deleted) and released leases (buffer.h)
//
// The reader/worker split lets a client pipeline: while one batch is being synced the next
// one queues. An invalid trajectory fails alone with INVALID_ARGUMENT naming the field (and is
// counted as buffer.dropped{reason=invalid}); the stream goes on.
//
// Bounds (docs/reliability.md, "Bounds"). Beyond the table itself, the server holds at most
//   gRPC's buffers                               limits.memory_quota_bytes
//   + per call in a handler (≤ limits.max_concurrent_calls):
//       an insert stream: the message being read, and its queue: ≤ max_queued_bytes_per_stream
//         (or one request when a single one is larger), and the batch being inserted
//       a sample stream: one batch being written (≤ limits.max_message_bytes)
// A message above limits.max_message_bytes ends its stream with RESOURCE_EXHAUSTED (what came
// before it is still acknowledged); one the memory quota cannot hold is reset by gRPC as it
// arrives. A call beyond max_concurrent_calls gets UNAVAILABLE; a stream that waits on its
// client for limits.idle_timeout is cancelled. Each but the reset is counted in
// rpc.refused{service=buffer,reason=…}.
#ifndef FLYWHEEL_BUFFER_SERVICE_H_
#define FLYWHEEL_BUFFER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/buffer/buffer.h"
#include "flywheel/core/metrics.h"
#include "flywheel/rpc/call_limiter.h"
#include "flywheel/rpc/rpc_security.h"
#include "flywheel/rpc/server_limits.h"
#include "flywheel/v1/buffer_service.grpc.pb.h"

namespace flywheel {

struct BufferServerOptions {
  std::string address = "127.0.0.1:0";  // port 0: pick a free one (see BufferServer::port)
  RpcSecurity security;                 // auth token, TLS, --insecure (rpc_security.h)
  ServerLimits limits;
  // What one insert stream may hold read but not yet inserted: past it the stream stops
  // reading, and HTTP/2 flow control holds the client back.
  int64_t max_queued_bytes_per_stream = 4 << 20;

  // The [buffer] section's server knobs (address, max_message_bytes, max_concurrent_calls, …);
  // security is the caller's.
  static BufferServerOptions FromConfig(const BufferOptions& buffer);
};

class BufferServiceImpl final : public v1::BufferService::Service {
 public:
  // An empty security.auth_token: no authentication.
  BufferServiceImpl(std::shared_ptr<Buffer> buffer, const BufferServerOptions& options);

  grpc::Status Insert(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::InsertResponse, v1::InsertRequest>* stream) override;
  grpc::Status Sample(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::SampleResponse, v1::SampleRequest>* stream) override;
  grpc::Status ServerInfo(grpc::ServerContext* context, const v1::ServerInfoRequest* request,
                          v1::ServerInfoResponse* response) override;
  grpc::Status SetLearnerVersion(grpc::ServerContext* context,
                                 const v1::SetLearnerVersionRequest* request,
                                 v1::SetLearnerVersionResponse* response) override;
  grpc::Status Acknowledge(grpc::ServerContext* context, const v1::AcknowledgeRequest* request,
                           v1::AcknowledgeResponse* response) override;

  int64_t invalid_count() const { return invalid_->value(); }
  const CallLimiter& limiter() const { return limiter_; }

 private:
  grpc::Status CheckAuth(const grpc::ServerContext* context) const;
  // Parses, validates and inserts the requests' trajectories, one ack per trajectory; writes
  // each request's response as soon as all its trajectories are handled. False when the
  // client is gone.
  bool HandleRequests(std::vector<v1::InsertRequest>& requests,
                      grpc::ServerReaderWriter<v1::InsertResponse, v1::InsertRequest>* stream,
                      CallSlot& slot);

  std::shared_ptr<Buffer> buffer_;
  const std::string auth_token_;
  const int64_t max_queued_bytes_per_stream_;
  CallLimiter limiter_;
  Counter* invalid_;
  Gauge* queued_bytes_;  // read from insert streams and not yet inserted, all streams
};

class BufferServer {
 public:
  static absl::StatusOr<std::unique_ptr<BufferServer>> Start(std::shared_ptr<Buffer> buffer,
                                                             const BufferServerOptions& options);
  ~BufferServer();

  int port() const { return port_; }
  std::string address() const;  // host:port actually bound
  // Closes the buffer (waking every blocked call) and stops serving.
  void Shutdown();
  void Wait();
  Buffer& buffer() { return *buffer_; }
  const BufferServiceImpl& service() const { return *service_; }

 private:
  BufferServer() = default;
  std::shared_ptr<Buffer> buffer_;
  std::unique_ptr<BufferServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string host_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_SERVICE_H_
