// Reads run directories (runs/<name>/) into the one JSON document that the report page draws:
//
//   {"runs": [{"name", "path", "metrics": [metrics.jsonl lines], "summary": summary.json | null,
//              "switches": [scheduler.jsonl "switch" events], "cells": {"core", "satellites"},
//              "config": config.toml text, "notes": ["…"]}]}
//
// Used by `flywheel report` on finished runs and by the live view (--dashboard-listen) on a run
// still going: its metrics.jsonl and scheduler.jsonl are appended line by line, so a last line
// without its newline may be half written; it is skipped with a note, never an error. Any other
// line that is not a JSON object is an error naming the file and the line. scheduler.jsonl keeps
// only the role switches: its decisions are many and the page draws roles, not causes.
#ifndef FLYWHEEL_OBSERVE_REPORT_DATA_H_
#define FLYWHEEL_OBSERVE_REPORT_DATA_H_

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel {

struct ReportDataOptions {
  // A run not started yet (no directory, no metrics.jsonl) reads as an empty run with a note
  // instead of an error: the live view starts serving before the job creates its directory.
  bool allow_missing = false;
};

// One run directory as an element of "runs".
absl::StatusOr<nlohmann::json> ReadRunForReport(const std::filesystem::path& dir,
                                                const ReportDataOptions& options = {});

// The whole document for several runs, overlaid in the page in the order given. Runs whose
// directories share a name are labelled by the path given instead.
absl::StatusOr<nlohmann::json> ReadReportData(const std::vector<std::filesystem::path>& dirs,
                                              const ReportDataOptions& options = {});

}  // namespace flywheel

#endif  // FLYWHEEL_OBSERVE_REPORT_DATA_H_
