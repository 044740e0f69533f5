// A client of the buffer service for actors, learners, tests and the benchmark. It adds the
// auth metadata to every call; Insert and Sample are the simple blocking forms, and stub() +
// NewContext() give the raw streams to callers that pipeline. Thread-safe (gRPC stubs are).
#ifndef FLYWHEEL_BUFFER_CLIENT_H_
#define FLYWHEEL_BUFFER_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/core/trajectory.h"
#include "flywheel/rpc/rpc_security.h"
#include "flywheel/v1/buffer_service.grpc.pb.h"

namespace flywheel {

class BufferClient {
 public:
  // `security`: the token to send and the TLS to use (rpc_security.h); a token that would go
  // in the clear beyond loopback is kFailedPrecondition here.
  static absl::StatusOr<std::unique_ptr<BufferClient>> Connect(const std::string& address,
                                                               const RpcSecurity& security = {});

  std::unique_ptr<grpc::ClientContext> NewContext() const;
  v1::BufferService::Stub& stub() { return *stub_; }

  // Sends every serialized trajectory on one stream, `per_request` per message, and returns
  // one ack per trajectory (in order). A stream-level failure is the returned Status.
  absl::StatusOr<std::vector<v1::InsertAck>> InsertSerialized(const std::vector<std::string>& wire,
                                                              int per_request = 64);
  absl::StatusOr<std::vector<v1::InsertAck>> Insert(const std::vector<Trajectory>& trajectories,
                                                    int per_request = 64);

  // One batch: each item is its trajectories (several for a group). Empty when none came
  // within the timeout.
  absl::StatusOr<std::vector<std::vector<Trajectory>>> Sample(int max_batch,
                                                              absl::Duration timeout);

  absl::StatusOr<v1::ServerInfoResponse> Info();
  absl::Status SetLearnerVersion(int64_t version);

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::BufferService::Stub> stub_;
  std::string auth_token_;
};

// A gRPC status as an absl::Status, its message prefixed with `what`. A message that gRPC
// refused for its size gets a hint at the server's max_message_bytes.
absl::Status FromGrpc(const grpc::Status& status, std::string_view what);

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_CLIENT_H_
