// Certificates for TLS tests, made by make_test_certs.sh (the openssl command line) in a fresh
// temporary directory that is removed with the object.
#ifndef FLYWHEEL_RPC_TEST_CERTS_H_
#define FLYWHEEL_RPC_TEST_CERTS_H_

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/core/strings.h"
#include "flywheel/rpc/rpc_security.h"

namespace flywheel::testing {

class TestCerts {
 public:
  TestCerts() {
    char tmpl[] = "/tmp/flywheel_certs_XXXXXX";
    const char* made = mkdtemp(tmpl);
    dir_ = made != nullptr ? made : "";
    const char* source = std::getenv("FLYWHEEL_SOURCE_DIR");
    const std::string script =
        StrCat(source != nullptr ? source : ".", "/src/flywheel/rpc/make_test_certs.sh");
    ok_ = !dir_.empty() &&
          std::system(StrCat("bash '", script, "' '", dir_, "' >/dev/null").c_str()) == 0;
  }
  ~TestCerts() {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  TestCerts(const TestCerts&) = delete;
  TestCerts& operator=(const TestCerts&) = delete;

  // False when openssl or the script failed (the test should fail, not skip).
  bool ok() const { return ok_; }
  std::string Path(const std::string& name) const { return StrCat(dir_, "/", name); }

  // Files for a server with server.pem; with `mutual`, clients need a certificate of ca.
  RpcSecurityFiles Server(bool mutual = false) const {
    RpcSecurityFiles files;
    files.tls_cert.path = Path("server.pem");
    files.tls_key.path = Path("server.key");
    if (mutual) files.tls_client_ca.path = Path("ca.pem");
    return files;
  }
  // Files for a client trusting `ca` ("ca.pem" or "other-ca.pem"), with `client` ("client",
  // "other-client") as its certificate unless empty.
  RpcSecurityFiles Client(const std::string& ca = "ca.pem", const std::string& client = "") const {
    RpcSecurityFiles files;
    files.tls_ca.path = Path(ca);
    if (!client.empty()) {
      files.tls_client_cert.path = Path(client + ".pem");
      files.tls_client_key.path = Path(client + ".key");
    }
    return files;
  }

 private:
  std::string dir_;
  bool ok_ = false;
};

}  // namespace flywheel::testing

#endif  // FLYWHEEL_RPC_TEST_CERTS_H_
