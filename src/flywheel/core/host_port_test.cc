#include "flywheel/core/host_port.h"

#include <gtest/gtest.h>

namespace flywheel {
namespace {

TEST(HostPortTest, SplitsHostAndPort) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(ParseHostPort("10.0.0.2:29500", &host, &port).ok());
  EXPECT_EQ(host, "10.0.0.2");
  EXPECT_EQ(port, 29500);
  ASSERT_TRUE(ParseHostPort("[::1]:7", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 7);
}

TEST(HostPortTest, RefusesWhatIsNotHostColonPortNamingTheAddress) {
  std::string host;
  int port = 0;
  EXPECT_FALSE(ParseHostPort("localhost:http", &host, &port).ok());
  EXPECT_FALSE(ParseHostPort(":80", &host, &port).ok());
  EXPECT_FALSE(ParseHostPort("h:70000", &host, &port).ok());
  EXPECT_FALSE(ParseHostPort("[::1", &host, &port).ok());
  const absl::Status status = ParseHostPort("localhost", &host, &port, "--metrics-listen");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "--metrics-listen 'localhost': no port (expected HOST:PORT)");
}

}  // namespace
}  // namespace flywheel
