#include "flywheel/core/logging.h"

#include <spdlog/spdlog.h>

#include "flywheel/core/strings.h"

namespace flywheel {

absl::Status SetLogLevel(std::string_view level) {
  const auto parsed = spdlog::level::from_str(std::string(level));
  // from_str maps anything unknown to "off"; only accept "off" when it was asked for.
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(StrCat(
        "unknown log level '", level, "' (expected trace, debug, info, warn, error, critical, off)"));
  }
  spdlog::set_level(parsed);
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ %v");
  return absl::OkStatus();
}

}  // namespace flywheel
