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
#ifndef FLYWHEEL_BUFFER_SERVICE_H_
#define FLYWHEEL_BUFFER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/buffer/buffer.h"
#include "flywheel/core/metrics.h"
#include "flywheel/v1/buffer_service.grpc.pb.h"

namespace flywheel {

class BufferServiceImpl final : public v1::BufferService::Service {
 public:
  // `auth_token` empty: no authentication (the default bind address is loopback only).
  BufferServiceImpl(std::shared_ptr<Buffer> buffer, std::string auth_token);

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

 private:
  grpc::Status CheckAuth(const grpc::ServerContext* context) const;
  // Parses, validates and inserts the requests' trajectories, one ack per trajectory; writes
  // each request's response as soon as all its trajectories are handled. False when the
  // client is gone.
  bool HandleRequests(std::vector<v1::InsertRequest>& requests,
                      grpc::ServerReaderWriter<v1::InsertResponse, v1::InsertRequest>* stream);

  std::shared_ptr<Buffer> buffer_;
  const std::string auth_token_;
  Counter* invalid_;
};

struct BufferServerOptions {
  std::string address = "127.0.0.1:0";  // port 0: pick a free one (see BufferServer::port)
  std::string auth_token;               // empty: no authentication
  int64_t max_message_bytes = 64 << 20;
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

 private:
  BufferServer() = default;
  std::shared_ptr<Buffer> buffer_;
  std::unique_ptr<BufferServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string host_;
  int port_ = 0;
  bool shut_down_ = false;
};

// Reads an auth token file (first line, surrounding whitespace trimmed); empty is an error.
absl::StatusOr<std::string> ReadAuthTokenFile(const std::string& path);

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_SERVICE_H_
