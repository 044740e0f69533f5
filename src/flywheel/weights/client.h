// A client of the weights service for actors and tests. GetVersion is the cheap poll; Fetch
// streams a snapshot newer than the caller's, reassembles and checks it, and builds a
// WeightSnapshot for the caller's model only when every tensor arrived intact. Thread-safe
// (gRPC stubs are); every call has a deadline.
#ifndef FLYWHEEL_WEIGHTS_CLIENT_H_
#define FLYWHEEL_WEIGHTS_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/model/model_options.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/rpc/rpc_security.h"
#include "flywheel/v1/weights_service.grpc.pb.h"

namespace flywheel {

struct FetchedWeights {
  // Null when the caller already had the latest version (nothing was sent).
  std::shared_ptr<const WeightSnapshot> snapshot;
  int64_t latest_version = -1;
  int64_t bytes = 0;
  int64_t chunks = 0;
};

class WeightsClient {
 public:
  // `security`: the token to send and the TLS to use; a token that would go in the clear
  // beyond loopback is kFailedPrecondition here (rpc_security.h).
  static absl::StatusOr<std::unique_ptr<WeightsClient>> Connect(const std::string& address,
                                                                const RpcSecurity& security = {});

  const std::string& address() const { return address_; }

  absl::StatusOr<v1::GetVersionResponse> GetVersion(absl::Duration timeout = absl::Seconds(5));

  // The latest snapshot if it is newer than `have_version` (-1: none yet), built for a model
  // of `options`. A stream that is cut short or does not match the model is an error and
  // nothing is returned. `max_chunk_bytes` 0 takes the server's chunk size.
  absl::StatusOr<FetchedWeights> Fetch(int64_t have_version, const ModelOptions& options,
                                       absl::Duration timeout = absl::Seconds(60),
                                       int64_t max_chunk_bytes = 0);

 private:
  std::string address_;
  std::string auth_token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WeightsService::Stub> stub_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_WEIGHTS_CLIENT_H_
