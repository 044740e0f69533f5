// The flags that name a process's auth token and TLS files (rpc/rpc_security.h): every command
// that serves or calls a gRPC service takes them, with the same names and meanings.
//
//   calling (learner, actor, cell)   --auth-token-file  --tls-ca  --tls-client-cert
//                                    --tls-client-key   --insecure
//   serving (serve buffer, learner)  --auth-token-file  --tls-cert  --tls-key  --tls-client-ca
//                                    --insecure
#ifndef FLYWHEEL_CLI_SECURITY_FLAGS_H_
#define FLYWHEEL_CLI_SECURITY_FLAGS_H_

#include <CLI/CLI.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/rpc/rpc_security.h"

namespace flywheel::cli {

struct SecurityFlags {
  RpcSecurityFiles files;

  // --auth-token-file (what the token is for differs per command) and --insecure.
  void AddToken(CLI::App* command, const std::string& token_help) {
    command->add_option("--auth-token-file", files.auth_token.path, token_help);
    command->add_flag("--insecure", files.insecure,
                      "allow the auth token in the clear (no TLS) to or from an address other "
                      "than 127.0.0.1, ::1, localhost: only on a network no one else can listen "
                      "on");
  }
  void AddClientTls(CLI::App* command) {
    command->add_option("--tls-ca", files.tls_ca.path,
                        "call every service over TLS, trusting server certificates signed by "
                        "this PEM CA");
    command->add_option("--tls-client-cert", files.tls_client_cert.path,
                        "mutual TLS: present this PEM certificate to the services (with "
                        "--tls-client-key)");
    command->add_option("--tls-client-key", files.tls_client_key.path,
                        "mutual TLS: the PEM private key of --tls-client-cert");
  }
  // `served` names what is served ("the buffer", "weights and scheduler").
  void AddServerTls(CLI::App* command, const std::string& served) {
    command->add_option("--tls-cert", files.tls_cert.path,
                        "serve " + served + " over TLS with this PEM certificate (chain)");
    command->add_option("--tls-key", files.tls_key.path, "the PEM private key of --tls-cert");
    command->add_option("--tls-client-ca", files.tls_client_ca.path,
                        "mutual TLS: accept only clients whose certificate this PEM CA signed");
  }

  absl::StatusOr<RpcSecurity> Load() const { return LoadRpcSecurity(files); }
};

}  // namespace flywheel::cli

#endif  // FLYWHEEL_CLI_SECURITY_FLAGS_H_
