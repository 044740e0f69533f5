#include "flywheel/observe/report_data.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "flywheel/core/config.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

absl::StatusOr<std::string> ReadWholeFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat(path.string(), ": cannot open for reading"));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::DataLossError(StrCat(path.string(), ": read failed"));
  return contents.str();
}

// The JSON objects of a JSON-lines file, blank lines skipped. A last line without its newline
// that does not parse is a write in progress: skipped, with a note.
absl::StatusOr<std::vector<json>> ReadJsonLines(const fs::path& path, json& notes) {
  ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(path));
  std::vector<json> lines;
  size_t begin = 0;
  for (int number = 1; begin < text.size(); ++number) {
    size_t end = text.find('\n', begin);
    const bool complete = end != std::string::npos;
    if (!complete) end = text.size();
    const std::string_view line(text.data() + begin, end - begin);
    begin = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    json value = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (value.is_object()) {
      lines.push_back(std::move(value));
    } else if (!complete) {
      notes.push_back(StrCat(path.filename().string(), ":", number,
                             ": last line incomplete (still being written), skipped"));
    } else {
      return absl::DataLossError(StrCat(path.string(), ":", number, ": not a JSON object: '",
                                        line.substr(0, 80), line.size() > 80 ? "…" : "", "'"));
    }
  }
  return lines;
}

// Cells of an elastic run: the core count from summary.json's "elastic" when there, satellites
// from the switches (each satellite starts in rollout; one that never switched is not drawn).
json ElasticCells(const json& summary, const std::vector<json>& switches) {
  int64_t satellites = 0;
  for (const json& s : switches) {
    satellites = std::max<int64_t>(satellites, s.value("satellite", int64_t{-1}) + 1);
  }
  int64_t core = 1;
  if (summary.is_object() && summary.contains("elastic") && summary["elastic"].is_object()) {
    core = summary["elastic"].value("core_cells", core);
    satellites = std::max(satellites, summary["elastic"].value("satellites", satellites));
  }
  return {{"core", core}, {"satellites", satellites}};
}

// [env.latency] of the run's effective config, for the page's latency chart; null when absent.
json EnvLatency(const toml::table& config) {
  const toml::table* latency = config.at_path("env.latency").as_table();
  if (latency == nullptr) return nullptr;
  std::ostringstream text;
  text << toml::json_formatter{*latency};
  return json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
}

}  // namespace

absl::StatusOr<json> ReadRunForReport(const fs::path& dir, const ReportDataOptions& options) {
  json run = {{"name", dir.filename().empty() ? dir.parent_path().filename().string()
                                              : dir.filename().string()},
              {"path", dir.string()},
              {"metrics", json::array()},
              {"summary", nullptr},
              {"switches", json::array()},
              {"config", ""},
              {"notes", json::array()}};
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    if (options.allow_missing) {
      run["notes"].push_back("run directory not created yet");
      return run;
    }
    return absl::NotFoundError(
        StrCat(dir.string(), ": no such run directory (give runs/<name> of a train run)"));
  }
  const fs::path metrics = dir / "metrics.jsonl";
  if (fs::exists(metrics, ec)) {
    ASSIGN_OR_RETURN(std::vector<json> lines, ReadJsonLines(metrics, run["notes"]));
    run["metrics"] = std::move(lines);
  } else if (options.allow_missing) {
    run["notes"].push_back("no metrics.jsonl yet");
  } else {
    return absl::NotFoundError(
        StrCat(metrics.string(), ": missing; is ", dir.string(), " the directory of a run?"));
  }
  if (fs::exists(dir / "summary.json", ec)) {
    ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(dir / "summary.json"));
    run["summary"] = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!run["summary"].is_object()) {
      return absl::DataLossError(StrCat((dir / "summary.json").string(), ": not a JSON object"));
    }
  }
  if (fs::exists(dir / "scheduler.jsonl", ec)) {
    ASSIGN_OR_RETURN(std::vector<json> events,
                     ReadJsonLines(dir / "scheduler.jsonl", run["notes"]));
    std::vector<json> switches;
    for (json& e : events) {
      if (e.value("event", "") == "switch") switches.push_back(std::move(e));
    }
    run["cells"] = ElasticCells(run["summary"], switches);
    run["switches"] = std::move(switches);
  }
  if (fs::exists(dir / "config.toml", ec)) {
    ASSIGN_OR_RETURN(std::string config, ReadWholeFile(dir / "config.toml"));
    ASSIGN_OR_RETURN(const toml::table table,
                     config::ParseToml(config, (dir / "config.toml").string()));
    run["env_latency"] = EnvLatency(table);
    run["config"] = std::move(config);
  }
  return run;
}

absl::StatusOr<json> ReadReportData(const std::vector<fs::path>& dirs,
                                    const ReportDataOptions& options) {
  json runs = json::array();
  std::multiset<std::string> names;
  for (const fs::path& dir : dirs) {
    ASSIGN_OR_RETURN(json run, ReadRunForReport(dir, options));
    names.insert(run["name"].get<std::string>());
    runs.push_back(std::move(run));
  }
  for (json& run : runs) {
    if (names.count(run["name"].get<std::string>()) > 1) run["name"] = run["path"];
  }
  return json{{"runs", std::move(runs)}};
}

}  // namespace flywheel
