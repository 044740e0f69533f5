#include "flywheel/observe/metrics_endpoint.h"

#include "flywheel/core/metrics.h"
#include "flywheel/observe/prometheus_text.h"

namespace flywheel {

absl::StatusOr<std::unique_ptr<HttpEndpoint>> ServeMetrics(const std::string& address) {
  const std::string host_port =
      !address.empty() && address[0] == ':' ? "127.0.0.1" + address : address;
  return HttpEndpoint::Start(host_port, "--metrics-listen",
                             {{"/metrics", std::string(kPrometheusContentType),
                               [] { return PrometheusText(MetricsRegistry::Global().View()); }}});
}

}  // namespace flywheel
