#include "flywheel/learner/checkpoint.h"

#include <fcntl.h>
#include <rocksdb/file_system.h>
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

absl::Status FromIo(const rocksdb::IOStatus& s, std::string_view what, const std::string& path) {
  if (s.ok()) return absl::OkStatus();
  if (s.IsNoSpace()) {
    return absl::ResourceExhaustedError(
        StrCat("checkpoint: ", what, " ", path, ": no space left on device (", s.ToString(), ")"));
  }
  return absl::InternalError(StrCat("checkpoint: ", what, " ", path, ": ", s.ToString()));
}

// Calls `file` for every file under `root`; returns `root` and the directories under it, each
// after its parent.
absl::StatusOr<std::vector<fs::path>> WalkTree(
    const std::string& root, const std::function<absl::Status(const std::string&)>& file) {
  std::vector<fs::path> directories{root};
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_directory()) {
      directories.push_back(it->path());
    } else {
      RETURN_IF_ERROR(file(it->path().string()));
    }
  }
  if (ec) return FsError("walking", root, ec);
  return directories;
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

CheckpointManager::CheckpointManager(CheckpointOptions options)
    : options_(std::move(options)),
      fs_(options_.file_system ? options_.file_system : rocksdb::FileSystem::Default()) {}

absl::Status CheckpointManager::SyncFile(const std::string& path) const {
  if (!options_.sync) return absl::OkStatus();
  // Reopened for appending, nothing appended: only the fsync of what the writer wrote.
  std::unique_ptr<rocksdb::FSWritableFile> file;
  RETURN_IF_ERROR(FromIo(fs_->ReopenWritableFile(path, rocksdb::FileOptions(), &file, nullptr),
                         "opening", path));
  RETURN_IF_ERROR(FromIo(file->Fsync(rocksdb::IOOptions(), nullptr), "fsync", path));
  return FromIo(file->Close(rocksdb::IOOptions(), nullptr), "closing", path);
}

absl::Status CheckpointManager::SyncDirectory(const std::string& path) const {
  if (!options_.sync) return absl::OkStatus();
  std::unique_ptr<rocksdb::FSDirectory> dir;
  RETURN_IF_ERROR(
      FromIo(fs_->NewDirectory(path, rocksdb::IOOptions(), &dir, nullptr), "opening", path));
  return FromIo(dir->Fsync(rocksdb::IOOptions(), nullptr), "fsync", path);
}

// Every file, then every directory bottom-up, so that each new entry is durable before the
// rename makes the tree visible.
absl::Status CheckpointManager::SyncTree(const std::string& root) const {
  ASSIGN_OR_RETURN(std::vector<fs::path> directories,
                   WalkTree(root, [&](const std::string& file) { return SyncFile(file); }));
  for (auto d = directories.rbegin(); d != directories.rend(); ++d) {
    RETURN_IF_ERROR(SyncDirectory(d->string()));
  }
  return absl::OkStatus();
}

// Deletes through the file system too, so that nothing is removed after a (simulated) power cut.
absl::Status CheckpointManager::RemoveTree(const std::string& root) const {
  ASSIGN_OR_RETURN(std::vector<fs::path> directories, WalkTree(root, [&](const std::string& file) {
                     return FromIo(fs_->DeleteFile(file, rocksdb::IOOptions(), nullptr), "removing",
                                   file);
                   }));
  for (auto d = directories.rbegin(); d != directories.rend(); ++d) {
    RETURN_IF_ERROR(FromIo(fs_->DeleteDir(d->string(), rocksdb::IOOptions(), nullptr), "removing",
                           d->string()));
  }
  return absl::OkStatus();
}

absl::Status CheckpointManager::WriteDoneMarker(const std::string& dir, int64_t step) const {
  const std::string path = (fs::path(dir) / kDoneMarker).string();
  std::unique_ptr<rocksdb::FSWritableFile> file;
  RETURN_IF_ERROR(
      FromIo(fs_->NewWritableFile(path, rocksdb::FileOptions(), &file, nullptr), "creating", path));
  RETURN_IF_ERROR(
      FromIo(file->Append(StrCat(step, "\n"), rocksdb::IOOptions(), nullptr), "writing", path));
  return FromIo(file->Close(rocksdb::IOOptions(), nullptr), "closing", path);
}

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
  RETURN_IF_ERROR(FromIo(fs_->CreateDir(temp.string(), rocksdb::IOOptions(), nullptr), "creating",
                         temp.string()));

  auto write_all = [&]() -> absl::Status {
    RETURN_IF_ERROR(Annotate(writer(temp.string()), StrCat("checkpoint step ", step)));
    RETURN_IF_ERROR(WriteDoneMarker(temp.string(), step));
    RETURN_IF_ERROR(SyncTree(temp.string()));
    // An incomplete directory of the same step (no DONE: not ours to trust) is replaced.
    if (fs::exists(final_path)) RETURN_IF_ERROR(RemoveTree(final_path));
    RETURN_IF_ERROR(
        FromIo(fs_->RenameFile(temp.string(), final_path, rocksdb::IOOptions(), nullptr),
               "renaming into", final_path));
    return SyncDirectory(options_.directory);
  };
  const absl::Status status = write_all();
  if (!status.ok()) {
    RemoveTree(temp.string()).IgnoreError();  // the next Save removes what is left
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
    // Remove the marker first: a half-deleted checkpoint must never look complete.
    const std::string done = (fs::path(PathFor(steps[i])) / kDoneMarker).string();
    RETURN_IF_ERROR(FromIo(fs_->DeleteFile(done, rocksdb::IOOptions(), nullptr), "removing", done));
    RETURN_IF_ERROR(RemoveTree(PathFor(steps[i])));
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
  for (const fs::path& p : stale) RETURN_IF_ERROR(RemoveTree(p.string()));
  return absl::OkStatus();
}

}  // namespace flywheel
