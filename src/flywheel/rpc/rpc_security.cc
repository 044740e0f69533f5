#include "flywheel/rpc/rpc_security.h"

#include <spdlog/spdlog.h>

#include "flywheel/core/host_port.h"
#include "flywheel/core/strings.h"
#include "flywheel/rpc/auth.h"

namespace flywheel {
namespace {

absl::Status NeedsBoth(const SettingFile& a, const SettingFile& b) {
  if (a.given() == b.given()) return absl::OkStatus();
  const SettingFile& given = a.given() ? a : b;
  const SettingFile& missing = a.given() ? b : a;
  return absl::InvalidArgumentError(
      StrCat(given.setting, " ", given.path, " needs ", missing.setting, " too"));
}

// The host of a gRPC target or listen address: "dns:///h:1" and "ipv4:h:1" lose their scheme,
// "[::1]:1" its brackets and port. Empty for a unix socket.
std::string HostOf(std::string_view address, bool* unix_socket) {
  *unix_socket = address.substr(0, 5) == "unix:";
  if (*unix_socket) return "";
  for (std::string_view scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (address.substr(0, scheme.size()) == scheme) {
      address.remove_prefix(scheme.size());
      break;
    }
  }
  // A bare IPv6 address ("::1") has colons but no brackets and no port.
  if (address.find('[') == std::string_view::npos && address.find(':') != address.rfind(':')) {
    return std::string(address);
  }
  std::string host;
  int port = 0;
  if (ParseHostPort(std::string(address), &host, &port).ok()) return host;
  return std::string(address);  // no port: the whole of it names the host
}

}  // namespace

std::string RpcSecurity::ServerTlsMode() const {
  if (!server_tls.enabled()) return "off";
  return server_tls.client_ca_pem.empty() ? "on" : "mutual";
}

absl::StatusOr<RpcSecurity> LoadRpcSecurity(const RpcSecurityFiles& files) {
  RpcSecurity security;
  security.insecure = files.insecure;
  if (files.auth_token.given()) {
    absl::StatusOr<std::string> token = ReadAuthTokenFile(files.auth_token.path);
    if (!token.ok()) {
      return absl::Status(token.status().code(),
                          StrCat(files.auth_token.setting, ": ", token.status().message()));
    }
    security.auth_token = *std::move(token);
  }
  auto read = [](const SettingFile& file, PemKind kind, std::string* out) -> absl::Status {
    if (!file.given()) return absl::OkStatus();
    absl::StatusOr<std::string> pem = ReadPemFile(file, kind);
    if (!pem.ok()) return pem.status();
    *out = *std::move(pem);
    return absl::OkStatus();
  };

  if (absl::Status s = NeedsBoth(files.tls_cert, files.tls_key); !s.ok()) return s;
  if (files.tls_client_ca.given() && !files.tls_cert.given()) {
    return absl::InvalidArgumentError(StrCat(files.tls_client_ca.setting, " ",
                                             files.tls_client_ca.path, " needs ",
                                             files.tls_cert.setting, " and ", files.tls_key.setting,
                                             ": mutual TLS is TLS with client certificates"));
  }
  ServerTls& server = security.server_tls;
  if (absl::Status s = read(files.tls_cert, PemKind::kCertificates, &server.cert_pem); !s.ok()) {
    return s;
  }
  if (absl::Status s = read(files.tls_key, PemKind::kPrivateKey, &server.key_pem); !s.ok()) {
    return s;
  }
  if (absl::Status s = read(files.tls_client_ca, PemKind::kCertificates, &server.client_ca_pem);
      !s.ok()) {
    return s;
  }
  if (server.enabled()) {
    if (absl::Status s = CheckKeyMatchesCertificate(server.cert_pem, files.tls_cert, server.key_pem,
                                                    files.tls_key);
        !s.ok()) {
      return s;
    }
  }

  if (absl::Status s = NeedsBoth(files.tls_client_cert, files.tls_client_key); !s.ok()) return s;
  if (files.tls_client_cert.given() && !files.tls_ca.given()) {
    return absl::InvalidArgumentError(StrCat(files.tls_client_cert.setting, " ",
                                             files.tls_client_cert.path, " needs ",
                                             files.tls_ca.setting,
                                             " (the CA of the servers' certificates): a client "
                                             "certificate is presented inside TLS"));
  }
  ClientTls& client = security.client_tls;
  if (absl::Status s = read(files.tls_ca, PemKind::kCertificates, &client.ca_pem); !s.ok()) {
    return s;
  }
  if (absl::Status s = read(files.tls_client_cert, PemKind::kCertificates, &client.cert_pem);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = read(files.tls_client_key, PemKind::kPrivateKey, &client.key_pem); !s.ok()) {
    return s;
  }
  if (!client.cert_pem.empty()) {
    if (absl::Status s = CheckKeyMatchesCertificate(client.cert_pem, files.tls_client_cert,
                                                    client.key_pem, files.tls_client_key);
        !s.ok()) {
      return s;
    }
  }
  return security;
}

bool IsLoopbackAddress(std::string_view address) {
  bool unix_socket = false;
  const std::string host = HostOf(address, &unix_socket);
  return unix_socket || host == "127.0.0.1" || host == "::1" || host == "localhost";
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const RpcSecurity& security, const std::string& address, std::string_view service) {
  const bool loopback = IsLoopbackAddress(address);
  const ServerTls& tls = security.server_tls;
  if (!tls.enabled()) {
    if (!security.auth_token.empty() && !loopback && !security.insecure) {
      return absl::FailedPreconditionError(
          StrCat(service, ": refusing to serve on ", address,
                 " with an auth token but without TLS: every client would send the token in the "
                 "clear to a port other machines can reach. Give --tls-cert and --tls-key, listen "
                 "on 127.0.0.1, or pass --insecure on a network where no one can listen"));
    }
    if (security.auth_token.empty() && !loopback) {
      spdlog::warn(
          "{}: serving on {} without an auth token or TLS: anyone who can reach it "
          "can call it",
          service, address);
    }
    return grpc::InsecureServerCredentials();
  }
  if (security.auth_token.empty() && tls.client_ca_pem.empty() && !loopback) {
    spdlog::warn(
        "{}: serving on {} with TLS but without an auth token or client certificates: "
        "anyone who can reach it can call it",
        service, address);
  }
  grpc::SslServerCredentialsOptions options(
      tls.client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = tls.client_ca_pem;
  options.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const RpcSecurity& security,
                                                           const std::string& address,
                                                           std::string_view service,
                                                           const grpc::ChannelArguments& args) {
  const ClientTls& tls = security.client_tls;
  if (!tls.enabled()) {
    if (!security.auth_token.empty() && !IsLoopbackAddress(address) && !security.insecure) {
      return absl::FailedPreconditionError(
          StrCat(service, " at ", address,
                 ": refusing to send the auth token in the clear to an address that is not "
                 "loopback (127.0.0.1, ::1, localhost). Give --tls-ca (the CA of the server's "
                 "certificate), or --insecure on a network where no one can listen"));
    }
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls.ca_pem;
  options.pem_cert_chain = tls.cert_pem;
  options.pem_private_key = tls.key_pem;
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(options), args);
}

grpc::ChannelArguments RestartingPeerChannelArgs() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Its own connection per client, as separate actor processes would have.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

}  // namespace flywheel
