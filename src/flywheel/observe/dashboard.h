// The live view of a run (--dashboard-listen on `flywheel train` and `flywheel learner`): the
// report page at "/", which fetches "/data.json" every few seconds while the run goes on.
//
// The data handler re-reads the run directory at each request (metrics.jsonl and
// scheduler.jsonl are appended and flushed line by line), so it shares no state with the job
// and is safe on the server's threads. Before the job creates the directory it serves an empty
// run with a note.
#ifndef FLYWHEEL_OBSERVE_DASHBOARD_H_
#define FLYWHEEL_OBSERVE_DASHBOARD_H_

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/observe/http_endpoint.h"

namespace flywheel {

// Seconds between two fetches of /data.json by the live page.
inline constexpr int kDashboardRefreshSeconds = 3;

// Serves the live view of `run_dir` on `address` (HOST:PORT; port 0 picks a free one) until the
// returned endpoint is destroyed.
absl::StatusOr<std::unique_ptr<HttpEndpoint>> StartDashboard(const std::string& address,
                                                             const std::filesystem::path& run_dir);

// The body of /data.json: the run as ReadReportData reads it, or {"error": "…"}.
std::string DashboardData(const std::filesystem::path& run_dir);

}  // namespace flywheel

#endif  // FLYWHEEL_OBSERVE_DASHBOARD_H_
