#include "flywheel/buffer/auth.h"

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

// Constant-time comparison, so the token cannot be guessed byte by byte from timing.
bool SameSecret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ (i < b.size() ? b[i] : 0);
  return diff == 0;
}

}  // namespace

grpc::Status CheckBearerToken(const grpc::ServerContext* context, const std::string& expected,
                              std::string_view service) {
  if (expected.empty()) return grpc::Status::OK;
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        StrCat("this ", service,
               " requires an auth token: send metadata "
               "'authorization: Bearer <token>' (--auth-token-file on the client)"));
  }
  const std::string_view value(it->second.data(), it->second.size());
  constexpr std::string_view kBearer = "Bearer ";
  if (value.substr(0, kBearer.size()) != kBearer ||
      !SameSecret(value.substr(kBearer.size()), expected)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        StrCat(service, ": auth token does not match"));
  }
  return grpc::Status::OK;
}

void AddBearerToken(grpc::ClientContext& context, const std::string& token) {
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
}

}  // namespace flywheel
