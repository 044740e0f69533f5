// Logging goes through spdlog; this sets it up once for the process.
#ifndef FLYWHEEL_CORE_LOGGING_H_
#define FLYWHEEL_CORE_LOGGING_H_

#include <string_view>

#include "absl/status/status.h"

namespace flywheel {

// Accepts trace, debug, info, warn, error, critical, off.
absl::Status SetLogLevel(std::string_view level);

}  // namespace flywheel

#endif  // FLYWHEEL_CORE_LOGGING_H_
