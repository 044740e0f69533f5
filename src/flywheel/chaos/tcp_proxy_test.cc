#include "flywheel/chaos/tcp_proxy.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "flywheel/core/strings.h"

namespace flywheel::chaos {
namespace {

// Echoes what each connection sends, one thread per connection.
class EchoServer {
 public:
  EchoServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(fd_, 16);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        const int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        workers_.emplace_back([c] {
          char buffer[4096];
          ssize_t n;
          while ((n = read(c, buffer, sizeof(buffer))) > 0) {
            if (write(c, buffer, static_cast<size_t>(n)) != n) break;
          }
          close(c);
        });
      }
    });
  }
  ~EchoServer() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
    for (auto& w : workers_) w.join();
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::vector<std::thread> workers_;
};

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

// Sends `text` and reads the echo back: the bytes, or "" when the connection broke or nothing
// came within the timeout.
std::string RoundTrip(int fd, const std::string& text, absl::Duration timeout = absl::Seconds(5)) {
  if (send(fd, text.data(), text.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(text.size())) {
    return "";
  }
  std::string got;
  const absl::Time deadline = absl::Now() + timeout;
  while (got.size() < text.size() && absl::Now() < deadline) {
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    char buffer[4096];
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) return "";
    got.append(buffer, static_cast<size_t>(n));
  }
  return got;
}

TEST(TcpProxyTest, ForwardsBothWaysAndDelaysWhenAsked) {
  EchoServer server;
  auto proxy = TcpProxy::Start(0, StrCat("127.0.0.1:", server.port()));
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  const int fd = Connect((*proxy)->port());
  EXPECT_EQ(RoundTrip(fd, "hello"), "hello");
  std::string big(1 << 20, 'x');  // more than one chunk each way
  EXPECT_EQ(RoundTrip(fd, big).size(), big.size());

  (*proxy)->SetDelay(absl::Milliseconds(150));
  const absl::Time start = absl::Now();
  EXPECT_EQ(RoundTrip(fd, "slow"), "slow");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));  // held once each way
  (*proxy)->SetDelay(absl::ZeroDuration());
  close(fd);
  EXPECT_EQ((*proxy)->stats().accepted, 1);
  EXPECT_GT((*proxy)->stats().bytes, 2 << 20);
}

TEST(TcpProxyTest, RefusesNewConnectionsForAWhileAndCutsOpenOnes) {
  EchoServer server;
  auto proxy = TcpProxy::Start(0, StrCat("127.0.0.1:", server.port()));
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  const int open = Connect((*proxy)->port());
  ASSERT_EQ(RoundTrip(open, "a"), "a");

  // A window far longer than the proxy can take to accept, even on a loaded machine (it decides
  // when it accepts, not when the client connects: a 300 ms window once closed before that).
  (*proxy)->RefuseFor(absl::Seconds(60));
  const int refused = Connect((*proxy)->port());  // the kernel accepts; the proxy resets it
  EXPECT_EQ(RoundTrip(refused, "b", absl::Seconds(1)), "");
  close(refused);
  EXPECT_EQ(RoundTrip(open, "c"), "c");  // connections already open are not touched
  // A new window replaces the old one, and connections are forwarded again once it is over.
  (*proxy)->RefuseFor(absl::Milliseconds(50));
  absl::SleepFor(absl::Milliseconds(100));
  const int later = Connect((*proxy)->port());
  EXPECT_EQ(RoundTrip(later, "d"), "d");

  (*proxy)->CutAll();
  EXPECT_EQ(RoundTrip(open, "e", absl::Seconds(1)), "");
  EXPECT_EQ(RoundTrip(later, "f", absl::Seconds(1)), "");
  close(open);
  close(later);
  const TcpProxy::Stats stats = (*proxy)->stats();
  EXPECT_EQ(stats.refused, 1);
  EXPECT_EQ(stats.cut, 2);
}

TEST(TcpProxyTest, AnUpstreamThatIsDownRefusesTheClient) {
  int port;
  {
    EchoServer gone;
    port = gone.port();
  }
  auto proxy = TcpProxy::Start(0, StrCat("127.0.0.1:", port));
  ASSERT_TRUE(proxy.ok());
  const int fd = Connect((*proxy)->port());
  EXPECT_EQ(RoundTrip(fd, "x", absl::Seconds(1)), "");
  close(fd);
  EXPECT_EQ(TcpProxy::Start(0, "nowhere:1").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flywheel::chaos
