#include "flywheel/scheduler/scheduler_log.h"

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "flywheel/core/strings.h"
#include "flywheel/scheduler/water_level.h"

namespace flywheel::scheduler {

absl::StatusOr<std::unique_ptr<SchedulerLog>> SchedulerLog::Open(
    const std::filesystem::path& path) {
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) {
    return absl::UnavailableError(
        StrCat("scheduler log ", path.string(), ": open for append: ", std::strerror(errno)));
  }
  return std::unique_ptr<SchedulerLog>(new SchedulerLog(path, file));
}

SchedulerLog::SchedulerLog(std::filesystem::path path, std::FILE* file)
    : path_(std::move(path)), file_(file) {}

SchedulerLog::~SchedulerLog() {
  absl::MutexLock lock(&mu_);
  std::fclose(file_);
}

absl::Status SchedulerLog::Append(const nlohmann::json& line) {
  // dump() before the lock: serialising is the costly part and needs no file.
  const std::string text = line.dump() + "\n";
  absl::MutexLock lock(&mu_);
  if (!error_.ok()) return error_;
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    error_ = absl::DataLossError(StrCat("scheduler log ", path_.string(), ": write: ",
                                        std::strerror(errno), "; later decisions are not logged"));
  }
  return error_;
}

absl::Status SchedulerLog::Append(const SchedulerDecision& decision) {
  return Append(decision.ToJson());
}

}  // namespace flywheel::scheduler
