// flywheel report RUN_DIR [RUN_DIR …] --out report.html
//
// One self-contained HTML file (uPlot and the data inlined) drawing the runs overlaid: see
// docs/observability.md for what each chart shows.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/cli/command.h"
#include "flywheel/core/file_util.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/observe/report_data.h"
#include "flywheel/observe/report_page.h"

namespace flywheel::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> run_dirs;
  std::string out = "report.html";
};

int RunReport(const ReportArgs& args) {
  std::vector<std::filesystem::path> dirs(args.run_dirs.begin(), args.run_dirs.end());
  auto data = ReadReportData(dirs);
  if (!data.ok()) return ReportError(data.status());
  std::vector<std::string> names;
  size_t lines = 0;
  for (const auto& run : (*data)["runs"]) {
    names.push_back(run["name"].get<std::string>());
    lines += run["metrics"].size();
    for (const auto& note : run["notes"]) {
      std::cerr << "flywheel: " << run["path"].get<std::string>() << ": " << note.get<std::string>()
                << "\n";
    }
  }
  std::string title = "flywheel report:";
  for (size_t i = 0; i < names.size(); ++i) title += StrCat(i == 0 ? " " : ", ", names[i]);
  const std::string page = RenderReportPage(*data, title);
  if (absl::Status s = WriteFileAtomically(args.out, page); !s.ok()) {
    return ReportError(Annotate(s, StrCat("--out ", args.out)));
  }
  std::cout << "report " << args.out << ": " << names.size() << " run(s), " << lines
            << " metrics lines, " << (page.size() + 1023) / 1024 << " KiB\n";
  return 0;
}

}  // namespace

void AddReportCommand(CLI::App& app, Invocation& invocation) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* report = app.add_subcommand(
      "report", "Draw runs (runs/<name>) into one self-contained HTML file of charts");
  report->add_option("run_dirs", args->run_dirs, "run directories, overlaid in this order")
      ->required();
  report->add_option("--out", args->out, "the HTML file to write")->capture_default_str();
  report->callback([args, &invocation] { invocation.run = [args] { return RunReport(*args); }; });
}

}  // namespace flywheel::cli
