// --dashboard-listen HOST:PORT on `flywheel train` and `flywheel learner`: the live view of the
// run (observe/dashboard.h), served until the command returns.
#ifndef FLYWHEEL_CLI_DASHBOARD_FLAG_H_
#define FLYWHEEL_CLI_DASHBOARD_FLAG_H_

#include <filesystem>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/observe/dashboard.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel::cli {

inline constexpr char kDashboardListenHelp[] =
    "serve the run's live charts on HOST:PORT (port 0 = any free port)";

// Null when `address` is empty (the flag not given). Prints the URL on `out`.
inline absl::StatusOr<std::unique_ptr<HttpEndpoint>> StartDashboardIfAsked(
    const std::string& address, const JobConfig& job, std::ostream& out) {
  if (address.empty()) return nullptr;
  const std::filesystem::path run_dir = std::filesystem::path(job.run.runs_dir) / job.run.name;
  auto endpoint = StartDashboard(address, run_dir);
  if (endpoint.ok()) {
    out << "flywheel: dashboard of " << run_dir.string() << " on http://" << (*endpoint)->address()
        << "/" << std::endl;
  }
  return endpoint;
}

}  // namespace flywheel::cli

#endif  // FLYWHEEL_CLI_DASHBOARD_FLAG_H_
