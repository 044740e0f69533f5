// Test helpers for runs of the embedded job on the examples (examples/guess.toml above all): the
// config in a fresh temporary runs directory, without environment latency, and the metrics.jsonl
// it writes.
#ifndef FLYWHEEL_RUNTIME_JOB_TEST_UTIL_H_
#define FLYWHEEL_RUNTIME_JOB_TEST_UTIL_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "flywheel/core/strings.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel::testing {

// examples/`example`.toml of the source tree.
inline std::string ExampleConfigPath(const std::string& example) {
  const char* source = std::getenv("FLYWHEEL_SOURCE_DIR");
  return StrCat(source != nullptr ? source : ".", "/examples/", example, ".toml");
}

inline std::string GuessConfigPath() { return ExampleConfigPath("guess"); }

// examples/`example`.toml as run `name` in an emptied temporary runs directory, with 1 ms
// constant environment latency (latency is what other tests are about); `overrides` are applied
// last.
inline absl::StatusOr<JobConfig> LoadExampleJob(const std::string& example,
                                                const std::string& name,
                                                const std::vector<std::string>& overrides) {
  const std::filesystem::path runs =
      std::filesystem::temp_directory_path() / ("flywheel_job_test_" + name);
  std::filesystem::remove_all(runs);
  std::vector<std::string> all = {StrCat("run.runs_dir=\"", runs.string(), "\""),
                                  StrCat("run.name=\"", name, "\""),
                                  "env.latency.model=\"constant\"", "env.latency.mean_ms=1"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return LoadJobConfig(ExampleConfigPath(example), all);
}

inline absl::StatusOr<JobConfig> LoadGuessJob(const std::string& name,
                                              const std::vector<std::string>& overrides) {
  return LoadExampleJob("guess", name, overrides);
}

// One JSON object per line of the run's metrics.jsonl.
inline std::vector<nlohmann::json> ReadMetrics(const JobConfig& config) {
  std::ifstream in(std::filesystem::path(config.run.runs_dir) / config.run.name / "metrics.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

}  // namespace flywheel::testing

#endif  // FLYWHEEL_RUNTIME_JOB_TEST_UTIL_H_
