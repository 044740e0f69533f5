// The buffer service over TLS and mutual TLS, with certificates made by the openssl command line
// (rpc/make_test_certs.sh), and the rule that a token never travels in the clear beyond
// loopback, on both sides.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/buffer/client.h"
#include "flywheel/buffer/service.h"
#include "flywheel/buffer/test_util.h"
#include "flywheel/core/strings.h"
#include "flywheel/rpc/test_certs.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

class BufferTlsTest : public ::testing::Test {
 protected:
  // One set of certificates for the suite: openssl takes a while to make them.
  static void SetUpTestSuite() { certs_ = new testing::TestCerts(); }
  static void TearDownTestSuite() { delete certs_; }
  void SetUp() override { ASSERT_TRUE(certs_->ok()) << "make_test_certs.sh failed (openssl?)"; }

  static RpcSecurity Load(const RpcSecurityFiles& files, const std::string& token = "") {
    absl::StatusOr<RpcSecurity> security = LoadRpcSecurity(files);
    EXPECT_TRUE(security.ok()) << security.status();
    security->auth_token = token;
    return *security;
  }

  absl::StatusOr<std::unique_ptr<BufferServer>> Start(const RpcSecurity& security,
                                                      const std::string& address = "127.0.0.1:0") {
    auto buffer = Buffer::Create(BufferOptions{});
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    BufferServerOptions options;
    options.address = address;
    options.security = security;
    return BufferServer::Start(std::shared_ptr<Buffer>(std::move(*buffer)), options);
  }

  // Inserts a trajectory and samples it back through a client with `security`.
  static absl::Status RoundTrip(int port, const RpcSecurity& security) {
    auto client = BufferClient::Connect(StrCat("127.0.0.1:", port), security);
    if (!client.ok()) return client.status();
    auto acks = (*client)->Insert({*testing::MakeTrajectory(StrCat("t", ++inserted_))});
    if (!acks.ok()) return acks.status();
    if ((*acks)[0].code() != 0) return absl::InternalError((*acks)[0].message());
    auto items = (*client)->Sample(1, absl::Seconds(5));
    if (!items.ok()) return items.status();
    if (items->size() != 1) return absl::InternalError("nothing sampled");
    return absl::OkStatus();
  }

  static testing::TestCerts* certs_;
  static int inserted_;
};
testing::TestCerts* BufferTlsTest::certs_ = nullptr;
int BufferTlsTest::inserted_ = 0;

TEST_F(BufferTlsTest, TlsServerAndClientTalk) {
  auto server = Start(Load(certs_->Server()));
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(RoundTrip((*server)->port(), Load(certs_->Client())).ok());
}

TEST_F(BufferTlsTest, PlaintextClientToTlsServerFails) {
  auto server = Start(Load(certs_->Server()));
  ASSERT_TRUE(server.ok()) << server.status();
  const absl::Status s = RoundTrip((*server)->port(), RpcSecurity());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

TEST_F(BufferTlsTest, ClientTrustingAnotherCaRefusesTheServer) {
  auto server = Start(Load(certs_->Server()));
  ASSERT_TRUE(server.ok()) << server.status();
  const absl::Status s = RoundTrip((*server)->port(), Load(certs_->Client("other-ca.pem")));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("handshake")) << s;
}

TEST_F(BufferTlsTest, MutualTlsNeedsAClientCertificateOfItsCa) {
  auto server = Start(Load(certs_->Server(/*mutual=*/true)));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_EQ(RoundTrip(port, Load(certs_->Client())).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(RoundTrip(port, Load(certs_->Client("ca.pem", "other-client"))).code(),
            absl::StatusCode::kUnavailable);
  const absl::Status s = RoundTrip(port, Load(certs_->Client("ca.pem", "client")));
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(BufferTlsTest, TokenTravelsInsideTlsOnAnyAddress) {
  // All interfaces: allowed with a token because of TLS.
  auto server = Start(Load(certs_->Server(), "s3cret"), "0.0.0.0:0");
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_TRUE(RoundTrip(port, Load(certs_->Client(), "s3cret")).ok());
  EXPECT_EQ(RoundTrip(port, Load(certs_->Client(), "guess")).code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(BufferTlsTest, TokenInTheClearBeyondLoopbackIsRefusedOnBothSidesUnlessInsecure) {
  RpcSecurity token = RpcSecurity::Token("s3cret");
  auto refused = Start(token, "0.0.0.0:0");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("buffer: refusing to serve on 0.0.0.0:0"));
  auto client = BufferClient::Connect("192.0.2.1:7300", token);  // TEST-NET-1: nobody there
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(client.status().message(), HasSubstr("refusing to send the auth token in the clear"));

  token.insecure = true;
  auto server = Start(token, "0.0.0.0:0");
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(BufferClient::Connect("192.0.2.1:7300", token).ok());  // channels connect lazily
  EXPECT_TRUE(RoundTrip((*server)->port(), token).ok());
}

}  // namespace
}  // namespace flywheel
