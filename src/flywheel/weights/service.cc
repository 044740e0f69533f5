#include "flywheel/weights/service.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/rpc/auth.h"

namespace flywheel {

WeightsServiceImpl::WeightsServiceImpl(std::string auth_token, int64_t max_chunk_bytes,
                                       const ServerLimits& limits)
    : auth_token_(std::move(auth_token)),
      max_chunk_bytes_(std::clamp<int64_t>(max_chunk_bytes, 1, kMaxWeightsChunkBytes)),
      limiter_("weights", limits) {}

absl::Status WeightsServiceImpl::Publish(const WeightSnapshot& snapshot) {
  auto published = std::make_shared<Published>();
  published->version = snapshot.version;
  ASSIGN_OR_RETURN(published->tensors, SnapshotTensors(snapshot));
  for (const auto& [name, tensor] : published->tensors) {
    RETURN_IF_ERROR(DtypeName(tensor.scalar_type()).status());
    published->total_bytes += static_cast<int64_t>(tensor.nbytes());
  }
  std::shared_ptr<const Published> previous;
  {
    absl::MutexLock lock(&mu_);
    if (latest_ != nullptr && snapshot.version < latest_->version) {
      return absl::InvalidArgumentError(StrCat("weights version ", snapshot.version,
                                               " published after version ", latest_->version));
    }
    previous = std::move(latest_);
    latest_ = std::move(published);
  }
  return absl::OkStatus();  // `previous` is freed here, outside the lock
}

void WeightsServiceImpl::SetFinished() {
  absl::MutexLock lock(&mu_);
  finished_ = true;
}

grpc::Status WeightsServiceImpl::GetVersion(grpc::ServerContext* context,
                                            const v1::GetVersionRequest* /*request*/,
                                            v1::GetVersionResponse* response) {
  if (grpc::Status s = CheckBearerToken(context, auth_token_, "weights service"); !s.ok()) {
    return s;
  }
  CallSlot slot = limiter_.Admit(context, CallKind::kUnary);
  if (!slot.admitted()) return slot.refusal();
  absl::MutexLock lock(&mu_);
  response->set_version(latest_ != nullptr ? latest_->version : -1);
  response->set_total_bytes(latest_ != nullptr ? latest_->total_bytes : 0);
  response->set_num_tensors(latest_ != nullptr ? static_cast<int32_t>(latest_->tensors.size()) : 0);
  response->set_finished(finished_);
  return grpc::Status::OK;
}

grpc::Status WeightsServiceImpl::FetchWeights(grpc::ServerContext* context,
                                              const v1::FetchWeightsRequest* request,
                                              grpc::ServerWriter<v1::WeightsChunk>* writer) {
  if (grpc::Status s = CheckBearerToken(context, auth_token_, "weights service"); !s.ok()) {
    return s;
  }
  CallSlot slot = limiter_.Admit(context, CallKind::kStream);
  if (!slot.admitted()) return slot.refusal();
  slot.Owe(1);  // until the last chunk: the idle watch looks at the writes alone
  std::shared_ptr<const Published> latest;
  {
    absl::MutexLock lock(&mu_);
    latest = latest_;
  }
  if (latest == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the learner has not published weights yet");
  }
  if (request->have_version() >= latest->version) {
    v1::WeightsChunk up_to_date;
    up_to_date.set_version(latest->version);
    up_to_date.set_up_to_date(true);
    writer->Write(up_to_date);
    return grpc::Status::OK;
  }
  const int64_t chunk_bytes = request->max_chunk_bytes() > 0
                                  ? std::min(request->max_chunk_bytes(), max_chunk_bytes_)
                                  : max_chunk_bytes_;
  const bool sent = ChunkTensors(latest->version, latest->tensors, chunk_bytes,
                                 [&](const v1::WeightsChunk& chunk) {
                                   auto writing = slot.Writing();
                                   return !context->IsCancelled() && writer->Write(chunk);
                                 });
  if (!sent) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
  return grpc::Status::OK;
}

absl::StatusOr<std::unique_ptr<WeightsServer>> WeightsServer::Start(
    const WeightsServerOptions& options) {
  const size_t colon = options.address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        StrCat("weights address \"", options.address, "\" is not host:port"));
  }
  RETURN_IF_ERROR(options.limits.Validate("weights service: "));
  ASSIGN_OR_RETURN(
      std::shared_ptr<grpc::ServerCredentials> credentials,
      MakeServerCredentials(options.security, options.address, "weights service"));
  std::unique_ptr<WeightsServer> server(new WeightsServer());
  server->host_ = options.address.substr(0, colon);
  server->service_ = std::make_unique<WeightsServiceImpl>(
      options.security.auth_token, options.max_chunk_bytes, options.limits);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, credentials, &server->port_);
  builder.RegisterService(server->service_.get());
  options.limits.ApplyTo(builder, "weights");
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        StrCat("cannot serve weights on ", options.address, " (address in use or invalid?)"));
  }
  return server;
}

std::string WeightsServer::address() const { return StrCat(host_, ":", port_); }

void WeightsServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

WeightsServer::~WeightsServer() { Shutdown(); }

}  // namespace flywheel
