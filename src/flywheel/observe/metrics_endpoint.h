// --metrics-listen: the process's metrics registry in Prometheus' text format at /metrics.
#ifndef FLYWHEEL_OBSERVE_METRICS_ENDPOINT_H_
#define FLYWHEEL_OBSERVE_METRICS_ENDPOINT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/observe/http_endpoint.h"

namespace flywheel {

// Serves MetricsRegistry::Global() at http://ADDRESS/metrics. ADDRESS is HOST:PORT, or :PORT
// for the loopback interface (127.0.0.1), which is also what people should choose unless a
// Prometheus on another machine scrapes this one.
absl::StatusOr<std::unique_ptr<HttpEndpoint>> ServeMetrics(const std::string& address);

}  // namespace flywheel

#endif  // FLYWHEEL_OBSERVE_METRICS_ENDPOINT_H_
