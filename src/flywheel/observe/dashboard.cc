#include "flywheel/observe/dashboard.h"

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "flywheel/core/strings.h"
#include "flywheel/observe/report_data.h"
#include "flywheel/observe/report_page.h"

namespace flywheel {

std::string DashboardData(const std::filesystem::path& run_dir) {
  ReportDataOptions options;
  options.allow_missing = true;
  absl::StatusOr<nlohmann::json> data = ReadReportData({run_dir}, options);
  if (!data.ok()) return nlohmann::json{{"error", data.status().message()}}.dump();
  return data->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<std::unique_ptr<HttpEndpoint>> StartDashboard(const std::string& address,
                                                             const std::filesystem::path& run_dir) {
  std::string page = RenderLivePage("data.json", kDashboardRefreshSeconds,
                                    StrCat("flywheel run ", run_dir.string(), " (live)"));
  std::vector<HttpRoute> routes;
  routes.push_back({"/", "text/html; charset=utf-8", [page = std::move(page)] { return page; }});
  routes.push_back(
      {"/data.json", "application/json", [run_dir] { return DashboardData(run_dir); }});
  return HttpEndpoint::Start(address, "--dashboard-listen", std::move(routes));
}

}  // namespace flywheel
