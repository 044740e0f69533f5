#include "flywheel/rpc/rpc_security.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/match.h"
#include "flywheel/rpc/test_certs.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

class RpcSecurityTest : public ::testing::Test {
 protected:
  // One set of certificates for the suite: openssl takes a while to make them.
  static void SetUpTestSuite() { certs = new testing::TestCerts(); }
  static void TearDownTestSuite() { delete certs; }
  void SetUp() override { ASSERT_TRUE(certs_.ok()) << "make_test_certs.sh failed (openssl?)"; }
  std::string Write(const std::string& name, const std::string& contents) {
    const std::string path = certs_.Path(name);
    std::ofstream(path) << contents;
    return path;
  }
  static testing::TestCerts* certs;
  const testing::TestCerts& certs_ = *certs;
};
testing::TestCerts* RpcSecurityTest::certs = nullptr;

TEST_F(RpcSecurityTest, LoadsServerAndClientFiles) {
  RpcSecurityFiles files = certs_.Server(/*mutual=*/true);
  const RpcSecurityFiles client = certs_.Client("ca.pem", "client");
  files.tls_ca = client.tls_ca;
  files.tls_client_cert = client.tls_client_cert;
  files.tls_client_key = client.tls_client_key;
  files.auth_token.path = Write("token", "  s3cret \n");
  absl::StatusOr<RpcSecurity> security = LoadRpcSecurity(files);
  ASSERT_TRUE(security.ok()) << security.status();
  EXPECT_EQ(security->auth_token, "s3cret");
  EXPECT_TRUE(security->server_tls.enabled());
  EXPECT_EQ(security->ServerTlsMode(), "mutual");
  EXPECT_THAT(security->server_tls.cert_pem, HasSubstr("BEGIN CERTIFICATE"));
  EXPECT_TRUE(security->client_tls.enabled());
  EXPECT_THAT(security->client_tls.key_pem, HasSubstr("PRIVATE KEY"));
  // With TLS the token may go anywhere: it travels encrypted.
  EXPECT_TRUE(MakeServerCredentials(*security, "0.0.0.0:7300", "buffer").ok());
  EXPECT_TRUE(MakeChannel(*security, "10.0.0.5:7300", "buffer", grpc::ChannelArguments()).ok());
}

TEST_F(RpcSecurityTest, TokenFileMustHoldAToken) {
  RpcSecurityFiles files;
  files.auth_token.path = Write("empty-token", "  \n");
  absl::Status s = LoadRpcSecurity(files).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--auth-token-file: auth token file"));
  files.auth_token.path = "/nonexistent/token";
  EXPECT_EQ(LoadRpcSecurity(files).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RpcSecurityTest, MissingFileNamesTheFlagAndThePath) {
  RpcSecurityFiles files = certs_.Server();
  files.tls_cert.path = "/nonexistent/server.pem";
  absl::Status s = LoadRpcSecurity(files).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("--tls-cert /nonexistent/server.pem: no such file"));
}

// Root reads any file, and CI runs as root: there the load runs in a child process that first
// becomes `nobody`, and the child's exit status carries the verdict.
TEST_F(RpcSecurityTest, UnreadableFileSaysSo) {
  RpcSecurityFiles files = certs_.Client();
  files.tls_ca.path = Write("unreadable.pem", "x");
  std::filesystem::permissions(files.tls_ca.path, std::filesystem::perms::none);
  const std::string expected = "--tls-ca " + files.tls_ca.path + ": cannot read it";
  auto refused = [&] {
    absl::Status s = LoadRpcSecurity(files).status();
    if (s.code() == absl::StatusCode::kPermissionDenied && absl::StrContains(s.message(), expected))
      return true;
    std::cerr << "got " << s << ", want PermissionDenied with '" << expected << "'\n";
    return false;
  };
  if (geteuid() != 0) {
    EXPECT_TRUE(refused());
    return;
  }
  // `nobody` must reach the file through its directory to meet the file's own permissions.
  std::filesystem::permissions(std::filesystem::path(files.tls_ca.path).parent_path(),
                               std::filesystem::perms::others_exec,
                               std::filesystem::perm_options::add);
  constexpr uid_t kNobody = 65534;
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // earlier tests left gRPC threads running
  EXPECT_EXIT(
      {
        if (setgid(kNobody) != 0 || setuid(kNobody) != 0 || geteuid() != kNobody) std::_Exit(2);
        std::_Exit(refused() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(RpcSecurityTest, NotPemIsRefusedNamingTheSetting) {
  RpcSecurityFiles files = certs_.Server();
  files.tls_cert.path = Write("garbage.pem", "this is not a certificate\n");
  files.tls_cert.setting = "buffer.tls_cert";  // as serve buffer names a path from the config
  absl::Status s = LoadRpcSecurity(files).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("buffer.tls_cert " + files.tls_cert.path + ": no PEM certificate in it"));

  // A certificate where the key belongs, and a key where a certificate belongs.
  files = certs_.Server();
  files.tls_key.path = certs_.Path("server.pem");
  s = LoadRpcSecurity(files).status();
  EXPECT_THAT(s.message(), HasSubstr("--tls-key " + files.tls_key.path + ": no PEM private key"));
  files = certs_.Client();
  files.tls_ca.path = certs_.Path("ca.key");
  s = LoadRpcSecurity(files).status();
  EXPECT_THAT(s.message(), HasSubstr("--tls-ca " + files.tls_ca.path + ": no PEM certificate"));
}

TEST_F(RpcSecurityTest, KeyOfAnotherCertificateIsRefused) {
  RpcSecurityFiles files = certs_.Server();
  files.tls_key.path = certs_.Path("client.key");
  absl::Status s = LoadRpcSecurity(files).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is not the private key of the certificate in --tls-cert"));
}

TEST_F(RpcSecurityTest, EncryptedKeyIsRefusedWithoutPrompting) {
  const std::string encrypted = certs_.Path("encrypted.key");
  ASSERT_EQ(std::system(StrCat("openssl pkey -in '", certs_.Path("server.key"), "' -aes256 ",
                               "-passout pass:secret -out '", encrypted, "'")
                            .c_str()),
            0);
  RpcSecurityFiles files = certs_.Server();
  files.tls_key.path = encrypted;
  absl::Status s = LoadRpcSecurity(files).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("the private key is encrypted"));
}

TEST_F(RpcSecurityTest, IncompletePairsAreRefused) {
  RpcSecurityFiles files;
  files.tls_cert.path = certs_.Path("server.pem");
  EXPECT_THAT(LoadRpcSecurity(files).status().message(), HasSubstr("needs --tls-key too"));
  files = RpcSecurityFiles();
  files.tls_client_ca.path = certs_.Path("ca.pem");
  EXPECT_THAT(LoadRpcSecurity(files).status().message(),
              HasSubstr("--tls-client-ca " + certs_.Path("ca.pem") + " needs --tls-cert"));
  files = RpcSecurityFiles();
  files.tls_client_key.path = certs_.Path("client.key");
  EXPECT_THAT(
      LoadRpcSecurity(files).status().message(),
      HasSubstr("--tls-client-key " + certs_.Path("client.key") + " needs --tls-client-cert too"));
  files = RpcSecurityFiles();
  files.tls_client_cert.path = certs_.Path("client.pem");
  files.tls_client_key.path = certs_.Path("client.key");
  EXPECT_THAT(LoadRpcSecurity(files).status().message(), HasSubstr("needs --tls-ca"));
}

TEST(IsLoopbackAddressTest, OnlyAddressesThisMachineAloneReaches) {
  for (const char* address :
       {"127.0.0.1:7300", "localhost:7300", "[::1]:7300", "::1", "dns:///localhost:7300",
        "ipv4:127.0.0.1:1", "unix:/tmp/socket", "127.0.0.1"}) {
    EXPECT_TRUE(IsLoopbackAddress(address)) << address;
  }
  for (const char* address : {"0.0.0.0:7300", "[::]:7300", "10.0.0.5:7300", "buffer-host:7300",
                              "dns:///buffer-host:7300", "127.0.0.2:7300", "localhost.evil:1"}) {
    EXPECT_FALSE(IsLoopbackAddress(address)) << address;
  }
}

TEST(TokenOverPlaintextTest, ServerRefusesToListenBeyondLoopbackUnlessInsecure) {
  RpcSecurity security = RpcSecurity::Token("t0ken");
  absl::Status s = MakeServerCredentials(security, "0.0.0.0:7300", "buffer").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("buffer: refusing to serve on 0.0.0.0:7300 with an auth "
                                     "token but without TLS"));
  EXPECT_THAT(s.message(), HasSubstr("--tls-cert"));
  EXPECT_THAT(s.message(), HasSubstr("--insecure"));
  EXPECT_TRUE(MakeServerCredentials(security, "127.0.0.1:7300", "buffer").ok());
  EXPECT_TRUE(MakeServerCredentials(RpcSecurity(), "0.0.0.0:7300", "buffer").ok());  // no token
  security.insecure = true;
  EXPECT_TRUE(MakeServerCredentials(security, "0.0.0.0:7300", "buffer").ok());
}

TEST(TokenOverPlaintextTest, ClientRefusesToSendItBeyondLoopbackUnlessInsecure) {
  RpcSecurity security = RpcSecurity::Token("t0ken");
  const grpc::ChannelArguments args;
  absl::Status s = MakeChannel(security, "10.0.0.5:7300", "buffer", args).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("buffer at 10.0.0.5:7300: refusing to send the auth token "
                                     "in the clear"));
  EXPECT_THAT(s.message(), HasSubstr("--tls-ca"));
  EXPECT_THAT(s.message(), HasSubstr("--insecure"));
  EXPECT_TRUE(MakeChannel(security, "127.0.0.1:7300", "buffer", args).ok());
  EXPECT_TRUE(MakeChannel(security, "localhost:7300", "buffer", args).ok());
  EXPECT_TRUE(MakeChannel(RpcSecurity(), "10.0.0.5:7300", "buffer", args).ok());
  security.insecure = true;
  EXPECT_TRUE(MakeChannel(security, "10.0.0.5:7300", "buffer", args).ok());
}

}  // namespace
}  // namespace flywheel
