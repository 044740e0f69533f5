#include "flywheel/runtime/run_directory.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

absl::Status ErrnoError(std::string_view what, const std::filesystem::path& path) {
  return absl::UnavailableError(StrCat(what, " ", path.string(), ": ", std::strerror(errno)));
}

absl::Status SyncDirectory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return ErrnoError("open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : ErrnoError("fsync directory", dir);
}

}  // namespace

absl::Status WriteFileAtomically(const std::filesystem::path& path, std::string_view contents) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return ErrnoError("create", tmp);
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return ErrnoError("write", tmp);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    return ErrnoError("fsync", tmp);
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("rename to", path);
  return SyncDirectory(path.parent_path().empty() ? "." : path.parent_path());
}

absl::StatusOr<std::unique_ptr<RunDirectory>> RunDirectory::Open(
    const std::filesystem::path& runs_dir, const std::string& name,
    const std::string& effective_config, bool resume) {
  const std::filesystem::path path = runs_dir / name;
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  if (exists && !resume) {
    return absl::AlreadyExistsError(
        StrCat("run directory ", path.string(),
               " already exists: pass --resume to continue it, or choose another run.name "
               "(--set run.name=…)"));
  }
  if (!exists && resume) {
    return absl::NotFoundError(StrCat("--resume: no run directory ", path.string()));
  }
  std::filesystem::create_directories(path / "checkpoints", ec);
  if (ec) {
    return absl::UnavailableError(StrCat("create ", path.string(), ": ", ec.message()));
  }
  if (auto s = WriteFileAtomically(path / "config.toml", effective_config); !s.ok()) return s;
  std::FILE* metrics = std::fopen((path / "metrics.jsonl").c_str(), "a");
  if (metrics == nullptr) return ErrnoError("open", path / "metrics.jsonl");
  return std::unique_ptr<RunDirectory>(new RunDirectory(path, metrics));
}

RunDirectory::~RunDirectory() {
  absl::MutexLock lock(&mu_);
  if (metrics_ != nullptr) std::fclose(metrics_);
}

absl::Status RunDirectory::AppendMetrics(const nlohmann::json& line) {
  const std::string text = line.dump() + "\n";
  absl::MutexLock lock(&mu_);
  if (std::fwrite(text.data(), 1, text.size(), metrics_) != text.size() ||
      std::fflush(metrics_) != 0) {
    return ErrnoError("append to", path_ / "metrics.jsonl");
  }
  return absl::OkStatus();
}

absl::Status RunDirectory::WriteSummary(const nlohmann::json& summary) {
  return WriteFileAtomically(path_ / "summary.json", summary.dump(2) + "\n");
}

}  // namespace flywheel
