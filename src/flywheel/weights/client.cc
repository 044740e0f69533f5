#include "flywheel/weights/client.h"

#include <chrono>

#include "flywheel/buffer/client.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"
#include "flywheel/model/transformer.h"
#include "flywheel/rpc/auth.h"
#include "flywheel/weights/snapshot_stream.h"

namespace flywheel {
namespace {

void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<WeightsClient>> WeightsClient::Connect(
    const std::string& address, const RpcSecurity& security) {
  auto client = std::unique_ptr<WeightsClient>(new WeightsClient());
  client->address_ = address;
  client->auth_token_ = security.auth_token;
  grpc::ChannelArguments args = RestartingPeerChannelArgs();
  args.SetMaxReceiveMessageSize(2 * kMaxWeightsChunkBytes);
  ASSIGN_OR_RETURN(client->channel_, MakeChannel(security, address, "weights service", args));
  client->stub_ = v1::WeightsService::NewStub(client->channel_);
  return client;
}

absl::StatusOr<v1::GetVersionResponse> WeightsClient::GetVersion(absl::Duration timeout) {
  grpc::ClientContext context;
  AddBearerToken(context, auth_token_);
  SetDeadline(context, timeout);
  v1::GetVersionResponse response;
  RETURN_IF_ERROR(FromGrpc(stub_->GetVersion(&context, {}, &response),
                           StrCat("weights service at ", address_, ": get version")));
  return response;
}

absl::StatusOr<FetchedWeights> WeightsClient::Fetch(int64_t have_version,
                                                    const ModelOptions& options,
                                                    absl::Duration timeout,
                                                    int64_t max_chunk_bytes) {
  grpc::ClientContext context;
  AddBearerToken(context, auth_token_);
  SetDeadline(context, timeout);
  v1::FetchWeightsRequest request;
  request.set_have_version(have_version);
  request.set_max_chunk_bytes(max_chunk_bytes);
  auto reader = stub_->FetchWeights(&context, request);
  FetchedWeights fetched;
  WeightsAssembler assembler;
  Transformer model{nullptr};
  v1::WeightsChunk chunk;
  absl::Status stream_error = absl::OkStatus();
  bool up_to_date = false;
  while (reader->Read(&chunk)) {
    if (chunk.up_to_date() && assembler.chunks() == 0) {
      up_to_date = true;
      fetched.latest_version = chunk.version();
      continue;
    }
    // The model the snapshot will be built into, built before the first chunk is taken apart:
    // its parameters are what the manifest must list before the assembler allocates.
    if (stream_error.ok() && !model) {
      stream_error = TorchCall(StrCat("weights from ", address_, ": build the model"),
                               [&] { model = ReceivingModel(options); });
      if (stream_error.ok()) {
        absl::StatusOr<std::vector<WeightsTensorSpec>> specs = ParameterSpecs(model);
        if (specs.ok()) assembler.Expect(*std::move(specs));
        stream_error = specs.status();
      }
    }
    if (stream_error.ok()) stream_error = assembler.Add(chunk);
    if (!stream_error.ok()) context.TryCancel();  // read what is left, then Finish
  }
  const grpc::Status finished = reader->Finish();
  const std::string what = StrCat("weights service at ", address_, ": fetch");
  // A manifest for another model is the configs' mismatch, not a damaged stream.
  if (stream_error.code() == absl::StatusCode::kInvalidArgument) {
    return Annotate(stream_error, what);
  }
  if (!stream_error.ok()) return absl::DataLossError(StrCat(what, ": ", stream_error.message()));
  RETURN_IF_ERROR(FromGrpc(finished, what));
  if (up_to_date) return fetched;
  absl::StatusOr<NamedTensors> tensors = assembler.Finish();
  if (!tensors.ok()) return Annotate(tensors.status(), what);
  fetched.latest_version = assembler.version();
  fetched.bytes = assembler.bytes_received();
  fetched.chunks = assembler.chunks();
  ASSIGN_OR_RETURN(fetched.snapshot,
                   SnapshotFromTensors(std::move(model), assembler.version(), *tensors));
  return fetched;
}

}  // namespace flywheel
