#include "flywheel/runtime/remote_buffer.h"

#include <chrono>
#include <optional>

#include "absl/time/clock.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/core/trajectory_proto.h"
#include "flywheel/runtime/remote_connect.h"

namespace flywheel {
namespace {

// Beyond the server-side wait: time for the transfer itself.
constexpr absl::Duration kTransferAllowance = absl::Seconds(10);
// How long the server may hold one insert for room in the buffer before the client asks again
// (and checks whether it should stop).
constexpr absl::Duration kInsertWait = absl::Seconds(1);

// The group size the buffer announces in its one-line description ("group_size=8"), or -1.
int64_t AnnouncedGroupSize(const std::string& description) {
  const std::string key = "group_size=";
  const size_t at = description.find(key);
  if (at == std::string::npos) return -1;
  try {
    return std::stoll(description.substr(at + key.size()));
  } catch (const std::exception&) {
    return -1;
  }
}

// An error naming the fix when the buffer at `address`, whose one-line description is
// `description` ("... group_size=8 ..."), releases groups of another size than `group_size`.
absl::Status CheckBufferGroupSize(const std::string& description, const std::string& address,
                                  int64_t group_size) {
  const int64_t announced = AnnouncedGroupSize(description);
  if (announced <= 0 || announced == group_size) return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat("the buffer at ", address, " releases groups of ", announced,
             " trajectories but actor.group_size = ", group_size,
             ": start it with --set buffer.group_size=", group_size,
             " (group advantages need whole groups)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RemoteBuffer>> RemoteBuffer::Connect(const std::string& address,
                                                                    const RpcSecurity& security) {
  auto buffer = std::unique_ptr<RemoteBuffer>(new RemoteBuffer());
  buffer->address_ = address;
  ASSIGN_OR_RETURN(buffer->client_, BufferClient::Connect(address, security));
  return buffer;
}

absl::StatusOr<std::unique_ptr<RemoteBuffer>> RemoteBuffer::ConnectAsLearner(
    const std::string& address, const RpcSecurity& security, absl::Duration timeout,
    const std::atomic<bool>* stop, int64_t group_size) {
  ASSIGN_OR_RETURN(std::unique_ptr<RemoteBuffer> buffer, Connect(address, security));
  std::string description;
  RETURN_IF_ERROR(WaitForService(
      "buffer", address, timeout,
      [&] {
        absl::StatusOr<v1::ServerInfoResponse> info = buffer->Info();
        if (info.ok()) description = info->description();
        return info.status();
      },
      stop));
  RETURN_IF_ERROR(CheckBufferGroupSize(description, address, group_size));
  return buffer;
}

std::unique_ptr<grpc::ClientContext> RemoteBuffer::Context(absl::Duration timeout) const {
  auto context = client_->NewContext();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
  return context;
}

std::string RemoteBuffer::What(std::string_view call) const {
  return StrCat("buffer at ", address_, ": ", call);
}

absl::StatusOr<v1::ServerInfoResponse> RemoteBuffer::Info(absl::Duration timeout) {
  auto context = Context(timeout);
  v1::ServerInfoResponse response;
  RETURN_IF_ERROR(FromGrpc(client_->stub().ServerInfo(context.get(), {}, &response), What("info")));
  return response;
}

absl::Status RemoteBuffer::SetLearnerVersion(int64_t version, absl::Duration timeout) {
  auto context = Context(timeout);
  v1::SetLearnerVersionRequest request;
  request.set_version(version);
  v1::SetLearnerVersionResponse response;
  return FromGrpc(client_->stub().SetLearnerVersion(context.get(), request, &response),
                  What("set learner version"));
}

absl::StatusOr<std::vector<std::vector<Trajectory>>> RemoteBuffer::SampleGroups(
    int max_batch, absl::Duration wait, const std::string& lease_owner) {
  auto context = Context(wait + kTransferAllowance);
  auto stream = client_->stub().Sample(context.get());
  v1::SampleRequest request;
  request.set_max_batch(max_batch);
  request.set_lease_owner(lease_owner);
  request.set_timeout_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(wait)));
  v1::SampleResponse response;
  const bool sent = stream->Write(request);
  stream->WritesDone();
  const bool got = sent && stream->Read(&response);
  v1::SampleResponse extra;
  while (stream->Read(&extra)) {
  }
  RETURN_IF_ERROR(FromGrpc(stream->Finish(), What("sample")));
  if (!got) return absl::UnavailableError(What("sample stream closed without a batch"));
  std::vector<std::vector<Trajectory>> items;
  for (const v1::SampledItem& item : response.items()) {
    std::vector<Trajectory>& group = items.emplace_back();
    for (const std::string& wire : item.trajectories()) {
      v1::Trajectory proto;
      if (!proto.ParseFromString(wire)) {
        return absl::DataLossError(What("sample: a trajectory does not parse"));
      }
      absl::StatusOr<Trajectory> t = FromProto(proto);
      if (!t.ok()) return Annotate(t.status(), What("sample"));
      // The buffer validated it on insert; the learner indexes by it, so it checks again what
      // came over the network.
      if (absl::Status s = t->Validate(); !s.ok()) {
        return absl::DataLossError(What(StrCat("sample: ", s.message())));
      }
      group.push_back(std::move(*t));
    }
  }
  return items;
}

absl::StatusOr<v1::AcknowledgeResponse> RemoteBuffer::Acknowledge(
    const v1::AcknowledgeRequest& request, absl::Duration timeout) {
  auto context = Context(timeout);
  v1::AcknowledgeResponse response;
  RETURN_IF_ERROR(FromGrpc(client_->stub().Acknowledge(context.get(), request, &response),
                           What("acknowledge")));
  return response;
}

absl::StatusOr<v1::InsertAck> RemoteBuffer::InsertOne(const std::string& wire,
                                                      absl::Duration wait) {
  auto context = Context(wait + kTransferAllowance);
  auto stream = client_->stub().Insert(context.get());
  v1::InsertRequest request;
  request.add_trajectories(wire);
  request.set_timeout_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(wait)));
  stream->Write(request);
  stream->WritesDone();
  std::optional<v1::InsertAck> ack;
  v1::InsertResponse response;
  while (stream->Read(&response)) {
    if (response.acks_size() > 0) ack = response.acks(0);
  }
  RETURN_IF_ERROR(FromGrpc(stream->Finish(), What("insert")));
  if (!ack.has_value()) return absl::UnavailableError(What("insert stream ended without an ack"));
  return *ack;
}

absl::StatusOr<std::vector<std::vector<Trajectory>>> RemoteBuffer::SampleGroupsOrWait(
    int max_batch, absl::Duration wait, absl::Duration unreachable_for,
    const std::string& lease_owner, bool* failed) {
  absl::StatusOr<std::vector<std::vector<Trajectory>>> items =
      SampleGroups(max_batch, wait, lease_owner);
  if (failed != nullptr) *failed = !items.ok();
  if (items.ok()) {
    last_sampled_ = absl::Now();
    return items;
  }
  if (!IsTransient(items.status())) return items.status();
  if (absl::Now() - last_sampled_ > unreachable_for) {
    return absl::UnavailableError(StrCat("lost the buffer at ", address_, " for ",
                                         absl::ToDoubleSeconds(unreachable_for),
                                         " s: ", items.status().message()));
  }
  absl::SleepFor(wait);
  return std::vector<std::vector<Trajectory>>();
}

absl::Status RemoteBuffer::Insert(const Trajectory& trajectory, const std::atomic<bool>& stopping,
                                  absl::Duration unreachable_for) {
  std::string wire;
  ToProto(trajectory).SerializeToString(&wire);
  std::optional<absl::Time> unreachable_since;
  while (true) {
    if (stopping.load()) return absl::CancelledError("the actor is stopping");
    absl::StatusOr<v1::InsertAck> ack = InsertOne(wire, kInsertWait);
    absl::Status status = ack.status();
    if (ack.ok()) {
      const auto code = static_cast<absl::StatusCode>(ack->code());
      if (code == absl::StatusCode::kOk) return absl::OkStatus();
      if (code == absl::StatusCode::kDeadlineExceeded) continue;  // full buffer: backpressure
      return absl::Status(
          code, StrCat("buffer at ", address_, " refused ", trajectory.id, ": ", ack->message()));
    }
    if (!IsTransient(status)) return status;
    if (!unreachable_since.has_value()) unreachable_since = absl::Now();
    if (absl::Now() - *unreachable_since > unreachable_for) {
      return absl::UnavailableError(StrCat("lost the buffer at ", address_, " for ",
                                           absl::ToDoubleSeconds(unreachable_for),
                                           " s: ", status.message()));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

}  // namespace flywheel
