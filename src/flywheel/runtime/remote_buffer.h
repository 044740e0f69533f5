// The buffer service's calls as `flywheel learner` and `flywheel actor` make them: every call
// has a deadline (a buffer process that hangs cannot hang its clients) and every error names
// the buffer's address. Thread-safe (gRPC stubs are).
#ifndef FLYWHEEL_RUNTIME_REMOTE_BUFFER_H_
#define FLYWHEEL_RUNTIME_REMOTE_BUFFER_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/buffer/client.h"
#include "flywheel/core/trajectory.h"

namespace flywheel {

class RemoteBuffer {
 public:
  static absl::StatusOr<std::unique_ptr<RemoteBuffer>> Connect(const std::string& address,
                                                               const RpcSecurity& security);

  // Connects as a learner does: waits up to `timeout` for the buffer to answer (giving up when
  // *stop is set), and refuses one whose groups are not of `group_size` trajectories.
  static absl::StatusOr<std::unique_ptr<RemoteBuffer>> ConnectAsLearner(
      const std::string& address, const RpcSecurity& security, absl::Duration timeout,
      const std::atomic<bool>* stop, int64_t group_size);

  const std::string& address() const { return address_; }

  absl::StatusOr<v1::ServerInfoResponse> Info(absl::Duration timeout = absl::Seconds(10));
  absl::Status SetLearnerVersion(int64_t version, absl::Duration timeout = absl::Seconds(10));

  // One batch of at most `max_batch` items (each a whole group), empty when none came within
  // `wait` (the server's wait for the first item); leased to `lease_owner` unless it is empty.
  absl::StatusOr<std::vector<std::vector<Trajectory>>> SampleGroups(
      int max_batch, absl::Duration wait, const std::string& lease_owner = "");
  // SampleGroups as a learner calls it: a buffer that is restarting or unreachable gives an
  // empty batch (after waiting `wait`) until it has not answered for `unreachable_for` since
  // its last successful sample, then kUnavailable naming it. `*failed` (optional) says whether
  // the call failed: a lease the buffer granted may then not have arrived.
  absl::StatusOr<std::vector<std::vector<Trajectory>>> SampleGroupsOrWait(
      int max_batch, absl::Duration wait, absl::Duration unreachable_for,
      const std::string& lease_owner = "", bool* failed = nullptr);
  // A learner's acknowledgement of its leases (consumed, released); see buffer_service.proto.
  absl::StatusOr<v1::AcknowledgeResponse> Acknowledge(const v1::AcknowledgeRequest& request,
                                                      absl::Duration timeout = absl::Seconds(10));

  // Inserts one serialized trajectory and returns its ack: OK, DEADLINE_EXCEEDED when the
  // buffer stayed full for `wait` (backpressure: ask again), or the server's refusal. A
  // failure of the call itself is the returned Status.
  absl::StatusOr<v1::InsertAck> InsertOne(const std::string& wire, absl::Duration wait);
  // Inserts `trajectory` as an actor does: waits out backpressure (a full buffer) and an
  // unreachable buffer for up to `unreachable_for`; kCancelled once `stopping` is set; the
  // server's refusal as its status.
  absl::Status Insert(const Trajectory& trajectory, const std::atomic<bool>& stopping,
                      absl::Duration unreachable_for);

 private:
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) const;
  std::string What(std::string_view call) const;

  std::string address_;
  std::unique_ptr<BufferClient> client_;
  absl::Time last_sampled_ = absl::Now();  // SampleGroupsOrWait's last success
};

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_REMOTE_BUFFER_H_
