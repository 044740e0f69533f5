// A Hugging Face model directory's generation_config.json: the stop tokens and the sampling
// defaults the model was published with. Only these keys are read; the file's other keys
// (max_length, repetition_penalty, …) are listed in `ignored_keys` for the log: they shape how
// transformers' generate() decodes, not what the model computes.
//
//   eos_token_id   int or list   → eos_token_ids (stop tokens)
//   bos_token_id, pad_token_id   → bos_token_id, pad_token_id
//   temperature, top_p, top_k    → defaults for [sampling] (applied by the job, not here)
//   do_sample                    → do_sample (false: the publisher meant greedy decoding)
#ifndef FLYWHEEL_MODEL_HF_GENERATION_CONFIG_H_
#define FLYWHEEL_MODEL_HF_GENERATION_CONFIG_H_

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel {

struct HfGenerationConfig {
  bool present = false;                // the directory has a generation_config.json
  std::vector<int64_t> eos_token_ids;  // empty when not given
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> pad_token_id;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<bool> do_sample;
  std::vector<std::string> ignored_keys;
  nlohmann::json json;  // the file as read (an empty object when absent)
};

// Parses the text of a generation_config.json; a known key of the wrong type is an error naming
// `source` and the key.
absl::StatusOr<HfGenerationConfig> ParseHfGenerationConfig(std::string_view json_text,
                                                           std::string_view source);
// Reads dir/generation_config.json; a directory without one gives an empty config.
absl::StatusOr<HfGenerationConfig> LoadHfGenerationConfig(const std::filesystem::path& dir);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_HF_GENERATION_CONFIG_H_
