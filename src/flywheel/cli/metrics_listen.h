// --metrics-listen, on every long-running command (train, learner, actor, cell, serve buffer):
// the process's metrics in Prometheus' text format at http://HOST:PORT/metrics.
#ifndef FLYWHEEL_CLI_METRICS_LISTEN_H_
#define FLYWHEEL_CLI_METRICS_LISTEN_H_

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/observe/metrics_endpoint.h"

namespace flywheel::cli {

struct MetricsListenFlag {
  std::string address;

  void Add(CLI::App* command) {
    command->add_option("--metrics-listen", address,
                        "serve Prometheus metrics at http://HOST:PORT/metrics (:PORT alone = "
                        "127.0.0.1; port 0 = any free port)");
  }

  // The endpoint when the flag was given (null otherwise); prints the URL it serves at on
  // stderr (stdout's first line is the service address of `serve buffer` and `learner`, which
  // scripts read). Keep it for as long as the command runs.
  absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start() const {
    if (address.empty()) return std::unique_ptr<HttpEndpoint>();
    absl::StatusOr<std::unique_ptr<HttpEndpoint>> endpoint = ServeMetrics(address);
    if (endpoint.ok()) {
      std::cerr << "flywheel: metrics at http://" << (*endpoint)->address() << "/metrics"
                << std::endl;
    }
    return endpoint;
  }
};

}  // namespace flywheel::cli

#endif  // FLYWHEEL_CLI_METRICS_LISTEN_H_
