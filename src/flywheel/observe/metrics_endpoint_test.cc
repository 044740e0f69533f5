#include "flywheel/observe/metrics_endpoint.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include "flywheel/core/metrics.h"

namespace flywheel {
namespace {

TEST(MetricsEndpointTest, ServesTheGlobalRegistryOnLoopbackForAPortAlone) {
  MetricsRegistry::Global()
      .GetCounter("endpoint_test.requests", "what the test counts")
      ->Increment(7);
  auto endpoint = ServeMetrics(":0");
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const std::string& address = (*endpoint)->address();
  ASSERT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
  httplib::Client client("127.0.0.1", std::stoi(address.substr(address.find(':') + 1)));
  auto response = client.Get("/metrics");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(response->body.find("# TYPE flywheel_endpoint_test_requests_total counter\n"
                                "flywheel_endpoint_test_requests_total 7\n"),
            std::string::npos)
      << response->body;
}

}  // namespace
}  // namespace flywheel
