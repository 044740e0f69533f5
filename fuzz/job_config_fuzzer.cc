// The job configuration (runtime/job_config.h): a TOML file a user writes or copies, bound to
// every component's Options and validated. Lines "#set KEY=VALUE" (TOML comments) are also
// applied as --set overrides. A config that loads must print (`flywheel config print`) as TOML
// that loads back to the same configuration.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/runtime/job_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    if (line.starts_with("#set ")) overrides.emplace_back(line.substr(5));
    at = end + 1;
  }
  absl::StatusOr<flywheel::JobConfig> job = flywheel::ParseJobConfig(text, "fuzz.toml", overrides);
  if (!job.ok()) return 0;
  const std::string printed = flywheel::FormatJobConfig(*job);
  absl::StatusOr<flywheel::JobConfig> again = flywheel::ParseJobConfig(printed, "printed.toml");
  if (!again.ok() || flywheel::FormatJobConfig(*again) != printed) std::abort();
  return 0;
}
