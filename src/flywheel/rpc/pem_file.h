// PEM files named by a setting (a flag such as --tls-cert, or a config key such as
// buffer.tls_cert), read and parsed with OpenSSL when a process starts, so that a wrong path or
// a file of the wrong kind fails at once with the setting and the file named, instead of as a
// TLS handshake error on the first call.
#ifndef FLYWHEEL_RPC_PEM_FILE_H_
#define FLYWHEEL_RPC_PEM_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flywheel {

// A file named by a setting, so that an error can say which setting to fix.
struct SettingFile {
  std::string path;     // empty: not given
  std::string setting;  // "--tls-cert", "buffer.tls_cert"

  bool given() const { return !path.empty(); }
};

enum class PemKind {
  kCertificates,  // one or more certificates: a certificate with its chain, or a CA bundle
  kPrivateKey,    // one unencrypted private key
};

// The file's contents when it holds what `kind` says (and no certificate in it has expired).
// Errors name the setting and the path: kNotFound (no such file), kPermissionDenied (cannot
// read it), kInvalidArgument (not PEM of that kind, an encrypted key, an expired certificate).
absl::StatusOr<std::string> ReadPemFile(const SettingFile& file, PemKind kind);

// OK when `key_pem` is the private key of the first certificate of `cert_pem` (both read by
// ReadPemFile); kInvalidArgument naming both settings otherwise.
absl::Status CheckKeyMatchesCertificate(const std::string& cert_pem, const SettingFile& cert,
                                        const std::string& key_pem, const SettingFile& key);

}  // namespace flywheel

#endif  // FLYWHEEL_RPC_PEM_FILE_H_
