// [sampling]'s defaults from the model directory a job starts from. A Hugging Face model is
// published with the sampling it was tuned for (generation_config.json: Qwen3 temperature 0.6,
// top_p 0.95, top_k 20); a job that names the directory and says nothing about sampling gets
// those, not SamplingParams' neutral 1.0 / 1.0 / 0. Precedence, key by key (temperature, top_p,
// top_k):
//
//   the job config ([sampling] in the file, or --set)  >  generation_config.json  >  defaults
//
// It is applied when the job config is loaded (LoadJobConfig), the only place that still sees
// which keys the file set, so every process of a job, `flywheel config print` and the run
// directory's config.toml hold the same resolved values (a resumed run reads them back as set).
#ifndef FLYWHEEL_RUNTIME_SAMPLING_DEFAULTS_H_
#define FLYWHEEL_RUNTIME_SAMPLING_DEFAULTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/config.h"
#include "flywheel/model/hf_generation_config.h"
#include "flywheel/model/sampling_params.h"

namespace flywheel {

// Sets the keys of `sampling` that `table` (the job's TOML after --set overrides) leaves unset
// from `generation`, and returns their names ("sampling.top_k = 20", …) for the log. A file with
// do_sample = false is not applied: its publisher meant greedy decoding, which gives a group
// identical rollouts, and its temperature may be a placeholder. A value that SamplingParams
// refuses is an error naming `source` and the key to set instead.
absl::StatusOr<std::vector<std::string>> ApplyGenerationDefaults(
    const toml::table& table, const HfGenerationConfig& generation, const std::string& source,
    SamplingParams* sampling);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_SAMPLING_DEFAULTS_H_
