// The report page: one self-contained HTML file (uPlot and the data inlined, no network needed)
// drawing the runs that report_data.h reads. The live view serves the same page, which then
// fetches its data from the process every few seconds instead.
//
// The page records its own script errors and, once drawn, fills #report-status with how many
// charts it drew and how many had data (data-charts, data-nonempty, data-errors), so that a
// headless browser can check it.
#ifndef FLYWHEEL_OBSERVE_REPORT_PAGE_H_
#define FLYWHEEL_OBSERVE_REPORT_PAGE_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace flywheel {

// `data` as ReadReportData returns it.
std::string RenderReportPage(const nlohmann::json& data, std::string_view title);

// Fetches `data_path` (relative to the page) every `refresh_seconds`.
std::string RenderLivePage(std::string_view data_path, int refresh_seconds, std::string_view title);

}  // namespace flywheel

#endif  // FLYWHEEL_OBSERVE_REPORT_PAGE_H_
