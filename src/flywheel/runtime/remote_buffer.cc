#include "flywheel/runtime/remote_buffer.h"

#include <chrono>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/core/trajectory_proto.h"

namespace flywheel {
namespace {

// Beyond the server-side wait: time for the transfer itself.
constexpr absl::Duration kTransferAllowance = absl::Seconds(10);

}  // namespace

absl::StatusOr<std::unique_ptr<RemoteBuffer>> RemoteBuffer::Connect(const std::string& address,
                                                                    const std::string& auth_token) {
  auto buffer = std::unique_ptr<RemoteBuffer>(new RemoteBuffer());
  buffer->address_ = address;
  ASSIGN_OR_RETURN(buffer->client_, BufferClient::Connect(address, auth_token));
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
    int max_batch, absl::Duration wait) {
  auto context = Context(wait + kTransferAllowance);
  auto stream = client_->stub().Sample(context.get());
  v1::SampleRequest request;
  request.set_max_batch(max_batch);
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
      group.push_back(std::move(*t));
    }
  }
  return items;
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

}  // namespace flywheel
