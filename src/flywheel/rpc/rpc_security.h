// How a flywheel process secures its gRPC services and calls: the bearer token (auth.h), TLS
// (the server's certificate and key, and optionally a CA that its clients' certificates must
// chain to: mutual TLS; the client's CA for the server's certificate, and optionally its own
// certificate and key), and one rule: a token is a password, so it never crosses a network in
// the clear.
//
//   token   TLS   address (listened on / called)   what happens
//   none    -     any                              allowed (a warning beyond loopback: anyone
//                                                  who can reach the port may call)
//   set     yes   any                              the token travels inside TLS
//   set     no    127.0.0.1, ::1, localhost        allowed: it never leaves the machine
//   set     no    any other                        refused (kFailedPrecondition) unless insecure
//
// The files are read and checked once, when the process starts (LoadRpcSecurity); every
// service and client then builds its credentials here, so that all of them follow the rule.
// A process uses TLS to every service it calls, or to none.
#ifndef FLYWHEEL_RPC_RPC_SECURITY_H_
#define FLYWHEEL_RPC_RPC_SECURITY_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "flywheel/rpc/pem_file.h"

namespace flywheel {

// What the command line (or the config) named. Each file's `setting` is how errors name it.
struct RpcSecurityFiles {
  SettingFile auth_token{"", "--auth-token-file"};
  // Serving.
  SettingFile tls_cert{"", "--tls-cert"};
  SettingFile tls_key{"", "--tls-key"};
  SettingFile tls_client_ca{"", "--tls-client-ca"};  // mutual TLS: clients must present a cert
  // Calling.
  SettingFile tls_ca{"", "--tls-ca"};  // turns TLS on for every call of the process
  SettingFile tls_client_cert{"", "--tls-client-cert"};
  SettingFile tls_client_key{"", "--tls-client-key"};
  bool insecure = false;  // --insecure: allow a token in the clear beyond loopback
};

// The PEM contents a server presents and checks. Empty cert_pem: plaintext.
struct ServerTls {
  std::string cert_pem;
  std::string key_pem;
  std::string client_ca_pem;  // non-empty: mutual TLS
  bool enabled() const { return !cert_pem.empty(); }
};

// The PEM contents a client checks and presents. Empty ca_pem: plaintext.
struct ClientTls {
  std::string ca_pem;
  std::string cert_pem;  // with key_pem: presented to servers that ask (mutual TLS)
  std::string key_pem;
  bool enabled() const { return !ca_pem.empty(); }
};

struct RpcSecurity {
  std::string auth_token;  // empty: no token sent or required
  ServerTls server_tls;
  ClientTls client_tls;
  bool insecure = false;

  // The token alone (tests, loopback deployments).
  static RpcSecurity Token(std::string token) {
    RpcSecurity security;
    security.auth_token = std::move(token);
    return security;
  }
  // "off", "on" or "mutual", for the line a server prints when it starts.
  std::string ServerTlsMode() const;
};

// Reads and checks every file `files` names (ReadAuthTokenFile, ReadPemFile); an incomplete
// pair (--tls-cert without --tls-key, a client certificate without --tls-ca, …) or a key that
// is not its certificate's is kInvalidArgument naming the settings.
absl::StatusOr<RpcSecurity> LoadRpcSecurity(const RpcSecurityFiles& files);

// 127.0.0.1, ::1 or localhost (with a port, "[::1]:7300", or a gRPC target such as
// "dns:///localhost:7300"), or a unix socket: an address only this machine reaches.
bool IsLoopbackAddress(std::string_view address);

// The credentials of `service` ("buffer", "weights service") listening on `address`: TLS with
// security.server_tls when set, plaintext otherwise; the rule above, with an error that names
// --tls-cert and --insecure.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const RpcSecurity& security, const std::string& address, std::string_view service);

// A channel to `service` at `address` with `args`: TLS with security.client_tls when set,
// plaintext otherwise; the rule above, with an error that names --tls-ca and --insecure.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const RpcSecurity& security,
                                                           const std::string& address,
                                                           std::string_view service,
                                                           const grpc::ChannelArguments& args);

// Arguments for a channel to a peer that restarts (the buffer, the learner's weights service):
// a lost peer is tried again at least every second, where gRPC's default backoff grows to two
// minutes and a client that met a few restarts in a row stayed away long after its peer was
// back (docs/reliability.md, chaos). Each attempt keeps gRPC's 20 s to connect: its minimum
// reconnect backoff is also that bound, and set to 100 ms it cut every handshake slower than
// that (a TLS link across regions, a loaded or instrumented process) before it finished.
grpc::ChannelArguments RestartingPeerChannelArgs();

}  // namespace flywheel

#endif  // FLYWHEEL_RPC_RPC_SECURITY_H_
