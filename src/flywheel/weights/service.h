// The learner's weights over gRPC (proto/flywheel/v1/weights_service.proto), hosted by
// `flywheel learner --weights-listen HOST:PORT`.
//
//   learner thread ──Publish(snapshot)──▶ host copy of the tensors ─▶ latest_ (shared_ptr)
//   GetVersion    ──▶ latest_'s version, size, finished                    │
//   FetchWeights  ──▶ takes a reference to latest_ under the lock, streams it outside the lock
//
// A fetch in progress keeps streaming the version it started with even when a newer one is
// published meanwhile; the host copy is freed when the last stream using it ends.
#ifndef FLYWHEEL_WEIGHTS_SERVICE_H_
#define FLYWHEEL_WEIGHTS_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/model/safetensors.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/rpc/call_limiter.h"
#include "flywheel/rpc/rpc_security.h"
#include "flywheel/rpc/server_limits.h"
#include "flywheel/v1/weights_service.grpc.pb.h"
#include "flywheel/weights/snapshot_stream.h"

namespace flywheel {

class WeightsServiceImpl final : public v1::WeightsService::Service {
 public:
  // `auth_token` empty: no authentication. Chunks are at most `max_chunk_bytes` (and at most
  // kMaxWeightsChunkBytes) whatever the client asks for. `limits` bound the calls (a fetch
  // whose client stops reading is cancelled after limits.idle_timeout).
  WeightsServiceImpl(std::string auth_token, int64_t max_chunk_bytes, const ServerLimits& limits);

  // Makes `snapshot` the one served. Copies its tensors to the host (the learner keeps
  // training on its own parameters). Versions must not go backwards.
  absl::Status Publish(const WeightSnapshot& snapshot);
  // GetVersion reports finished = true from now on: the run has ended.
  void SetFinished();

  grpc::Status GetVersion(grpc::ServerContext* context, const v1::GetVersionRequest* request,
                          v1::GetVersionResponse* response) override;
  grpc::Status FetchWeights(grpc::ServerContext* context, const v1::FetchWeightsRequest* request,
                            grpc::ServerWriter<v1::WeightsChunk>* writer) override;

 private:
  struct Published {
    int64_t version = 0;
    int64_t total_bytes = 0;
    NamedTensors tensors;
  };

  const std::string auth_token_;
  const int64_t max_chunk_bytes_;
  CallLimiter limiter_;
  absl::Mutex mu_;
  std::shared_ptr<const Published> latest_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

struct WeightsServerOptions {
  std::string address = "127.0.0.1:0";  // port 0: pick a free one (see WeightsServer::address)
  RpcSecurity security;                 // auth token, TLS, --insecure (rpc_security.h)
  int64_t max_chunk_bytes = kDefaultWeightsChunkBytes;
  ServerLimits limits;
};

class WeightsServer {
 public:
  static absl::StatusOr<std::unique_ptr<WeightsServer>> Start(const WeightsServerOptions& options);
  ~WeightsServer();

  std::string address() const;  // host:port actually bound
  absl::Status Publish(const WeightSnapshot& snapshot) { return service_->Publish(snapshot); }
  void SetFinished() { service_->SetFinished(); }
  // Stops serving; streams in flight get a short grace period.
  void Shutdown();

 private:
  WeightsServer() = default;
  std::unique_ptr<WeightsServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string host_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace flywheel

#endif  // FLYWHEEL_WEIGHTS_SERVICE_H_
