#include "flywheel/rpc/auth.h"

#include <fstream>

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

absl::StatusOr<std::string> ReadAuthTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot read auth token file ", path));
  std::string token;
  std::getline(in, token);
  const size_t begin = token.find_first_not_of(" \t\r\n");
  const size_t end = token.find_last_not_of(" \t\r\n");
  if (begin == std::string::npos) {
    return absl::InvalidArgumentError(StrCat("auth token file ", path, " is empty"));
  }
  return token.substr(begin, end - begin + 1);
}

}  // namespace flywheel
