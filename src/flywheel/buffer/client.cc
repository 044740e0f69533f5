#include "flywheel/buffer/client.h"

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/core/trajectory_proto.h"
#include "flywheel/rpc/auth.h"

namespace flywheel {

absl::Status FromGrpc(const grpc::Status& status, std::string_view what) {
  if (status.ok()) return absl::OkStatus();
  const bool too_large = status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
                         status.error_message().find("larger than max") != std::string::npos;
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      StrCat(what, ": ", status.error_message(),
                             too_large ? " (the server's max_message_bytes: send less per "
                                         "message, or raise it there)"
                                       : ""));
}

absl::StatusOr<std::unique_ptr<BufferClient>> BufferClient::Connect(const std::string& address,
                                                                    const RpcSecurity& security) {
  auto client = std::make_unique<BufferClient>();
  grpc::ChannelArguments args = RestartingPeerChannelArgs();
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  ASSIGN_OR_RETURN(client->channel_, MakeChannel(security, address, "buffer", args));
  client->stub_ = v1::BufferService::NewStub(client->channel_);
  client->auth_token_ = security.auth_token;
  return client;
}

std::unique_ptr<grpc::ClientContext> BufferClient::NewContext() const {
  auto context = std::make_unique<grpc::ClientContext>();
  AddBearerToken(*context, auth_token_);
  return context;
}

absl::StatusOr<std::vector<v1::InsertAck>> BufferClient::InsertSerialized(
    const std::vector<std::string>& wire, int per_request) {
  auto context = NewContext();
  auto stream = stub_->Insert(context.get());
  std::vector<v1::InsertAck> acks;
  for (size_t i = 0; i < wire.size(); i += static_cast<size_t>(per_request)) {
    v1::InsertRequest request;
    request.set_sequence(i);
    for (size_t j = i; j < std::min(wire.size(), i + static_cast<size_t>(per_request)); ++j) {
      request.add_trajectories(wire[j]);
    }
    if (!stream->Write(request)) break;
  }
  stream->WritesDone();
  v1::InsertResponse response;
  while (stream->Read(&response)) {
    for (auto& ack : *response.mutable_acks()) acks.push_back(std::move(ack));
  }
  if (absl::Status s = FromGrpc(stream->Finish(), "buffer insert stream"); !s.ok()) return s;
  if (acks.size() != wire.size()) {
    return absl::DataLossError(StrCat("buffer insert stream ended with ", acks.size(), " acks for ",
                                      wire.size(), " trajectories"));
  }
  return acks;
}

absl::StatusOr<std::vector<v1::InsertAck>> BufferClient::Insert(
    const std::vector<Trajectory>& trajectories, int per_request) {
  std::vector<std::string> wire(trajectories.size());
  for (size_t i = 0; i < trajectories.size(); ++i) {
    ToProto(trajectories[i]).SerializeToString(&wire[i]);
  }
  return InsertSerialized(wire, per_request);
}

absl::StatusOr<std::vector<std::vector<Trajectory>>> BufferClient::Sample(int max_batch,
                                                                          absl::Duration timeout) {
  auto context = NewContext();
  auto stream = stub_->Sample(context.get());
  v1::SampleRequest request;
  request.set_max_batch(max_batch);
  request.set_timeout_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
  v1::SampleResponse response;
  const bool sent = stream->Write(request);
  stream->WritesDone();
  const bool got = sent && stream->Read(&response);
  while (stream->Read(&response)) {
  }
  if (absl::Status s = FromGrpc(stream->Finish(), "buffer sample stream"); !s.ok()) return s;
  if (!got) return absl::UnavailableError("buffer sample stream closed without a batch");
  std::vector<std::vector<Trajectory>> items;
  for (const v1::SampledItem& item : response.items()) {
    std::vector<Trajectory>& out = items.emplace_back();
    for (const std::string& wire : item.trajectories()) {
      v1::Trajectory proto;
      if (!proto.ParseFromString(wire)) {
        return absl::DataLossError("buffer sample: a trajectory does not parse");
      }
      absl::StatusOr<Trajectory> t = FromProto(proto);
      if (!t.ok()) return t.status();
      // The buffer validated it on insert; the learner indexes by it, so it checks again what
      // came over the network.
      if (absl::Status s = t->Validate(); !s.ok()) {
        return absl::DataLossError(StrCat("buffer sample: ", s.message()));
      }
      out.push_back(std::move(*t));
    }
  }
  return items;
}

absl::StatusOr<v1::ServerInfoResponse> BufferClient::Info() {
  auto context = NewContext();
  v1::ServerInfoResponse response;
  if (absl::Status s = FromGrpc(stub_->ServerInfo(context.get(), {}, &response), "buffer info");
      !s.ok()) {
    return s;
  }
  return response;
}

absl::Status BufferClient::SetLearnerVersion(int64_t version) {
  auto context = NewContext();
  v1::SetLearnerVersionRequest request;
  request.set_version(version);
  v1::SetLearnerVersionResponse response;
  return FromGrpc(stub_->SetLearnerVersion(context.get(), request, &response),
                  "buffer set learner version");
}

}  // namespace flywheel
