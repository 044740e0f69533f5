// The remote learner's record of what it consumed: one JSON line per step in
// runs/<name>/consumed.jsonl,
//
//   {"step": 12, "t": 1717171717.123, "trained": ["actor-0@3f.1-5", …],
//    "dropped": {"learner_stale": [...], "learner_too_long": [...]}, "skipped": 0}
//
// ("skipped": trajectories delivered again while held, not trained twice), and
//
//   {"resumed_from": 10, "t": …}
//
// when a learner resumes: the earlier lines' steps after 10 were rolled back with the weights;
// and {"dropped_after": 12, "dropped": {…}} for what a learner stopping after step 12 dropped
// since (its last checkpoint, at step 12, holds them).
// Each step's line is flushed before that step's checkpoint is written, so a checkpoint never
// holds a step the record lacks (a SIGKILL keeps what was flushed). `flywheel chaos` builds its
// ledger from it (docs/reliability.md). Not thread-safe.
#ifndef FLYWHEEL_RUNTIME_CONSUMED_LOG_H_
#define FLYWHEEL_RUNTIME_CONSUMED_LOG_H_

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace flywheel {

class ConsumedLog {
 public:
  static constexpr const char* kFileName = "consumed.jsonl";

  // Opens (appending to) `path`.
  static absl::StatusOr<std::unique_ptr<ConsumedLog>> Open(const std::filesystem::path& path);
  ~ConsumedLog();

  // Appends `line` with "t" (Unix seconds) added, and flushes it to the kernel.
  absl::Status Append(nlohmann::json line);

 private:
  ConsumedLog(std::filesystem::path path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  const std::filesystem::path path_;
  std::FILE* const file_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_CONSUMED_LOG_H_
