#include "flywheel/runtime/consumed_log.h"

#include <cerrno>
#include <cstring>

#include "absl/time/clock.h"
#include "flywheel/core/strings.h"

namespace flywheel {

absl::StatusOr<std::unique_ptr<ConsumedLog>> ConsumedLog::Open(const std::filesystem::path& path) {
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) {
    return absl::InternalError(StrCat("cannot open ", path.string(), ": ", std::strerror(errno)));
  }
  return std::unique_ptr<ConsumedLog>(new ConsumedLog(path, file));
}

ConsumedLog::~ConsumedLog() { std::fclose(file_); }

absl::Status ConsumedLog::Append(nlohmann::json line) {
  line["t"] = static_cast<double>(absl::ToUnixMicros(absl::Now())) * 1e-6;
  const std::string text = line.dump() + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    return absl::InternalError(StrCat("writing ", path_.string(), ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace flywheel
