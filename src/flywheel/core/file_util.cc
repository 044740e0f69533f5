#include "flywheel/core/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

absl::Status ErrnoError(std::string_view what, const std::filesystem::path& path) {
  return absl::UnavailableError(StrCat(what, " ", path.string(), ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::DataLossError(std::strerror(errno));
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return ErrnoError("open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : ErrnoError("fsync directory", dir);
}

}  // namespace

absl::Status WriteFileAtomically(const std::filesystem::path& path,
                                 std::span<const std::string_view> chunks) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return ErrnoError("create", tmp);
  absl::Status status;
  for (std::string_view chunk : chunks) {
    status = WriteAll(fd, chunk);
    if (!status.ok()) break;
  }
  if (status.ok() && ::fsync(fd) != 0) status = absl::DataLossError(std::strerror(errno));
  ::close(fd);
  if (!status.ok()) {
    std::remove(tmp.c_str());
    return absl::DataLossError(StrCat("writing ", tmp.string(), ": ", status.message()));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("rename to", path);
  return SyncDirectory(path.parent_path().empty() ? "." : path.parent_path());
}

}  // namespace flywheel
