// A client reaches the buffer over a slow link: TLS through a proxy that holds every chunk for
// 150 ms, so the handshake's round trips take most of a second. The client must wait for the
// handshake to finish, not give up on each attempt after a fixed fraction of a second.
#include <gtest/gtest.h>

#include "flywheel/buffer/client.h"
#include "flywheel/buffer/service.h"
#include "flywheel/buffer/test_util.h"
#include "flywheel/chaos/tcp_proxy.h"
#include "flywheel/core/strings.h"
#include "flywheel/rpc/test_certs.h"

namespace flywheel {
namespace {

TEST(SlowLinkTest, ATlsHandshakeSlowerThanTheReconnectBackoffStillConnects) {
  testing::TestCerts certs;
  ASSERT_TRUE(certs.ok()) << "make_test_certs.sh failed (openssl?)";
  auto server_security = LoadRpcSecurity(certs.Server());
  ASSERT_TRUE(server_security.ok()) << server_security.status();
  auto buffer = Buffer::Create(BufferOptions{});
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  BufferServerOptions options;
  options.security = *server_security;
  auto server = BufferServer::Start(std::shared_ptr<Buffer>(std::move(*buffer)), options);
  ASSERT_TRUE(server.ok()) << server.status();

  auto proxy = chaos::TcpProxy::Start(0, (*server)->address());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  (*proxy)->SetDelay(absl::Milliseconds(150));

  auto client_security = LoadRpcSecurity(certs.Client());
  ASSERT_TRUE(client_security.ok()) << client_security.status();
  auto client = BufferClient::Connect(StrCat("127.0.0.1:", (*proxy)->port()), *client_security);
  ASSERT_TRUE(client.ok()) << client.status();
  const absl::Time start = absl::Now();
  auto acks = (*client)->Insert({*testing::MakeTrajectory("t")});
  ASSERT_TRUE(acks.ok()) << acks.status();
  ASSERT_EQ((*acks)[0].code(), 0) << (*acks)[0].message();
  // The link was really slow: at least the TLS handshake's two round trips went through it.
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(600));
}

}  // namespace
}  // namespace flywheel
