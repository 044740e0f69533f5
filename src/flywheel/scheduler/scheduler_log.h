// Appends scheduler decisions as JSON lines (runs/<name>/scheduler.jsonl), one object per line,
// flushed per line so a crashed job keeps every decision it logged. It is a diagnostic log, not
// a durable store: lines are not fsynced.
//
// The first write error is latched (LevelDB's bg_error_): later appends return it instead of
// writing lines after a gap.
//
// Thread-safety: Append may be called from any thread; lines never interleave.
#ifndef FLYWHEEL_SCHEDULER_SCHEDULER_LOG_H_
#define FLYWHEEL_SCHEDULER_SCHEDULER_LOG_H_

#include <cstdio>
#include <filesystem>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include <nlohmann/json.hpp>

namespace flywheel::scheduler {

struct SchedulerDecision;

class SchedulerLog {
 public:
  // Opens `path` for appending, creating it (not its directory) if needed.
  static absl::StatusOr<std::unique_ptr<SchedulerLog>> Open(const std::filesystem::path& path);
  ~SchedulerLog();
  SchedulerLog(const SchedulerLog&) = delete;
  SchedulerLog& operator=(const SchedulerLog&) = delete;

  absl::Status Append(const nlohmann::json& line);
  absl::Status Append(const SchedulerDecision& decision);

  const std::filesystem::path& path() const { return path_; }

 private:
  SchedulerLog(std::filesystem::path path, std::FILE* file);

  const std::filesystem::path path_;
  absl::Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_);  // owned; closed by the destructor
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel::scheduler

#endif  // FLYWHEEL_SCHEDULER_SCHEDULER_LOG_H_
