#include "flywheel/learner/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kStepPrefix = "step-";
constexpr std::string_view kTempPrefix = ".tmp-";

absl::Status FsError(std::string_view what, const std::string& path, const std::error_code& ec) {
  return absl::InternalError(StrCat("checkpoint: ", what, " ", path, ": ", ec.message()));
}

// "step-0000000042" → 42; nullopt for any other name.
std::optional<int64_t> ParseStepName(const std::string& name) {
  if (name.rfind(kStepPrefix, 0) != 0 || name.size() == kStepPrefix.size()) return std::nullopt;
  int64_t step = 0;
  for (size_t i = kStepPrefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

absl::Status FsyncTree(const fs::path& root) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    RETURN_IF_ERROR(FsyncPath(it->path().string()));
  }
  if (ec) return FsError("walking", root.string(), ec);
  return FsyncPath(root.string());
}

}  // namespace

absl::Status FsyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(StrCat("checkpoint: open ", path, ": ", std::strerror(errno)));
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0)
    return absl::InternalError(StrCat("checkpoint: fsync ", path, ": ", std::strerror(err)));
  return absl::OkStatus();
}

CheckpointManager::CheckpointManager(CheckpointOptions options) : options_(std::move(options)) {}

std::string CheckpointManager::PathFor(int64_t step) const {
  return (fs::path(options_.directory) / fmt::format("{}{:010d}", kStepPrefix, step)).string();
}

absl::StatusOr<std::string> CheckpointManager::Save(int64_t step, const Writer& writer) {
  if (step < 0) return absl::InvalidArgumentError("checkpoint: step must be >= 0");
  std::error_code ec;
  fs::create_directories(options_.directory, ec);
  if (ec) return FsError("creating", options_.directory, ec);
  RETURN_IF_ERROR(RemoveTemporaries());

  const std::string final_path = PathFor(step);
  if (fs::exists(fs::path(final_path) / kDoneMarker)) {
    return absl::AlreadyExistsError(
        StrCat("checkpoint: ", final_path, " already exists and is complete"));
  }
  const fs::path temp =
      fs::path(options_.directory) /
      fmt::format("{}{}{:010d}-{}-{}", kTempPrefix, kStepPrefix, step, ::getpid(), save_counter_++);
  fs::create_directory(temp, ec);
  if (ec) return FsError("creating", temp.string(), ec);

  auto write_all = [&]() -> absl::Status {
    RETURN_IF_ERROR(Annotate(writer(temp.string()), StrCat("checkpoint step ", step)));
    {
      std::ofstream done(temp / kDoneMarker, std::ios::trunc);
      done << step << "\n";
      if (!done.flush()) {
        return absl::InternalError(StrCat("checkpoint: writing ", (temp / kDoneMarker).string()));
      }
    }
    RETURN_IF_ERROR(FsyncTree(temp));
    // An incomplete directory of the same step (no DONE: not ours to trust) is replaced.
    if (fs::exists(final_path)) {
      fs::remove_all(final_path, ec);
      if (ec) return FsError("removing incomplete", final_path, ec);
    }
    fs::rename(temp, final_path, ec);
    if (ec) return FsError("renaming into", final_path, ec);
    return FsyncPath(options_.directory);
  };
  const absl::Status status = write_all();
  if (!status.ok()) {
    std::error_code ignored;
    fs::remove_all(temp, ignored);
    return status;
  }
  RETURN_IF_ERROR(Prune());
  return final_path;
}

absl::StatusOr<std::vector<int64_t>> CheckpointManager::CompleteSteps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::exists(options_.directory, ec)) return steps;
  for (auto it = fs::directory_iterator(options_.directory, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    const std::optional<int64_t> step = ParseStepName(it->path().filename().string());
    if (!step || !it->is_directory()) continue;
    if (fs::is_regular_file(it->path() / kDoneMarker)) steps.push_back(*step);
  }
  if (ec) return FsError("listing", options_.directory, ec);
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<std::optional<std::string>> CheckpointManager::Latest() const {
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, CompleteSteps());
  if (steps.empty()) return std::optional<std::string>();
  return std::optional<std::string>(PathFor(steps.back()));
}

absl::Status CheckpointManager::Prune() {
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, CompleteSteps());
  const int64_t excess = static_cast<int64_t>(steps.size()) - options_.keep_last;
  for (int64_t i = 0; i < excess; ++i) {
    std::error_code ec;
    // Remove the marker first: a half-deleted checkpoint must never look complete.
    fs::remove(fs::path(PathFor(steps[i])) / kDoneMarker, ec);
    if (!ec) fs::remove_all(PathFor(steps[i]), ec);
    if (ec) return FsError("removing old", PathFor(steps[i]), ec);
  }
  return absl::OkStatus();
}

absl::Status CheckpointManager::RemoveTemporaries() const {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (auto it = fs::directory_iterator(options_.directory, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->path().filename().string().rfind(kTempPrefix, 0) == 0) stale.push_back(it->path());
  }
  if (ec) return FsError("listing", options_.directory, ec);
  for (const fs::path& p : stale) {
    fs::remove_all(p, ec);
    if (ec) return FsError("removing stale", p.string(), ec);
  }
  return absl::OkStatus();
}

}  // namespace flywheel
