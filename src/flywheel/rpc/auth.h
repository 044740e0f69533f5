// Bearer-token authentication shared by flywheel's gRPC services (buffer, weights, scheduler).
// With a token, every call must carry metadata `authorization: Bearer <token>`; the token comes
// from the first line of a file (--auth-token-file), never from the command line. A token is a
// password: rpc_security.h refuses to send or accept it in the clear beyond loopback.
#ifndef FLYWHEEL_RPC_AUTH_H_
#define FLYWHEEL_RPC_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace flywheel {

// OK when `expected` is empty (no authentication) or the call carries it; UNAUTHENTICATED
// otherwise, naming `service` ("buffer", "weights service") and how to send the token.
grpc::Status CheckBearerToken(const grpc::ServerContext* context, const std::string& expected,
                              std::string_view service);

// Adds the metadata CheckBearerToken expects (nothing when `token` is empty).
void AddBearerToken(grpc::ClientContext& context, const std::string& token);

// Reads an auth token file (first line, surrounding whitespace trimmed); empty is an error.
absl::StatusOr<std::string> ReadAuthTokenFile(const std::string& path);

}  // namespace flywheel

#endif  // FLYWHEEL_RPC_AUTH_H_
