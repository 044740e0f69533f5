// Durable file writes: a file is replaced only by a complete, synced new version
// (LevelDB's SetCurrentFile pattern: temp file, fsync, rename, fsync of the directory).
#ifndef FLYWHEEL_CORE_FILE_UTIL_H_
#define FLYWHEEL_CORE_FILE_UTIL_H_

#include <filesystem>
#include <span>
#include <string_view>

#include "absl/status/status.h"

namespace flywheel {

// Writes the concatenation of `chunks` to `path` atomically. On failure the temp file is removed
// and `path` keeps its previous contents.
absl::Status WriteFileAtomically(const std::filesystem::path& path,
                                 std::span<const std::string_view> chunks);
inline absl::Status WriteFileAtomically(const std::filesystem::path& path,
                                        std::string_view contents) {
  return WriteFileAtomically(path, std::span<const std::string_view>(&contents, 1));
}

}  // namespace flywheel

#endif  // FLYWHEEL_CORE_FILE_UTIL_H_
