#include "flywheel/runtime/sampling_defaults.h"

#include "flywheel/core/strings.h"

namespace flywheel {

absl::StatusOr<std::vector<std::string>> ApplyGenerationDefaults(
    const toml::table& table, const HfGenerationConfig& generation, const std::string& source,
    SamplingParams* sampling) {
  std::vector<std::string> applied;
  if (!generation.present || generation.do_sample == false) return applied;
  const auto unset = [&](const char* key) {
    return table.at_path(StrCat("sampling.", key)).node() == nullptr;
  };
  if (generation.temperature && unset("temperature")) {
    sampling->temperature = *generation.temperature;
    applied.push_back(StrCat("sampling.temperature = ", sampling->temperature));
  }
  if (generation.top_p && unset("top_p")) {
    sampling->top_p = *generation.top_p;
    applied.push_back(StrCat("sampling.top_p = ", sampling->top_p));
  }
  if (generation.top_k && unset("top_k")) {
    sampling->top_k = *generation.top_k;
    applied.push_back(StrCat("sampling.top_k = ", sampling->top_k));
  }
  if (absl::Status valid = sampling->Validate(); !valid.ok() && !applied.empty()) {
    return absl::InvalidArgumentError(
        StrCat(source, ": ", valid.message(),
               " (the value is the file's; set the key in the job config's [sampling] to "
               "override it)"));
  }
  return applied;
}

}  // namespace flywheel
