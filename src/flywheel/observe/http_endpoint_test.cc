#include "flywheel/observe/http_endpoint.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>

namespace flywheel {
namespace {

TEST(HttpEndpointTest, ServesItsRoutesOnTheBoundPort) {
  std::atomic<int> calls{0};
  auto endpoint = HttpEndpoint::Start(
      "127.0.0.1:0", "--metrics-listen",
      {{"/metrics", "text/plain", [&] { return "calls " + std::to_string(++calls) + "\n"; }}});
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const std::string address = (*endpoint)->address();
  ASSERT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
  const int port = std::stoi(address.substr(address.find(':') + 1));
  ASSERT_GT(port, 0);
  httplib::Client client("127.0.0.1", port);
  auto first = client.Get("/metrics");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->body, "calls 1\n");
  EXPECT_EQ(first->get_header_value("Content-Type"), "text/plain");
  auto second = client.Get("/metrics");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->body, "calls 2\n");
  auto missing = client.Get("/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_NE(missing->body.find("served: /metrics"), std::string::npos) << missing->body;
}

TEST(HttpEndpointTest, APortInUseOrABadAddressIsRefusedNamingTheFlag) {
  auto first = HttpEndpoint::Start("127.0.0.1:0", "--metrics-listen", {});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = HttpEndpoint::Start((*first)->address(), "--metrics-listen", {});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("--metrics-listen '127.0.0.1:"), std::string::npos)
      << second.status();
  auto bad = HttpEndpoint::Start("localhost", "--dashboard-listen", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--dashboard-listen 'localhost': no port"),
            std::string::npos)
      << bad.status();
}

TEST(HttpEndpointTest, StopsAtOnceAfterStart) {
  for (int i = 0; i < 20; ++i) {
    auto endpoint = HttpEndpoint::Start("127.0.0.1:0", "--metrics-listen", {});
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  }
}

}  // namespace
}  // namespace flywheel
