// A Hugging Face model's config.json as the model loader reads it (model/hf_config.h; `model.path`
// in a job, `flywheel export`), and its generation_config.json: the input is the file's text,
// read as both. A config that parses gives ModelOptions that pass Validate() when applied to the
// job's defaults, and the config.json flywheel writes for them (export) parses back to the same
// shape.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "flywheel/model/hf_config.h"
#include "flywheel/model/hf_generation_config.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)flywheel::ParseHfGenerationConfig(text, "generation_config.json");
  absl::StatusOr<flywheel::HfModelConfig> hf = flywheel::ParseHfModelConfig(text, "config.json");
  if (!hf.ok()) return 0;
  absl::StatusOr<flywheel::ModelOptions> options =
      flywheel::ApplyHfModelConfig(flywheel::ModelOptions{}, *hf);
  if (!options.ok()) return 0;
  if (!options->Validate().ok()) return 0;
  const nlohmann::json written = flywheel::HfConfigJsonFor(*options, "float32");
  absl::StatusOr<flywheel::HfModelConfig> again =
      flywheel::ParseHfModelConfig(written.dump(), "exported config.json");
  Check(again.ok());
  Check(again->model.hidden_size == options->hidden_size);
  Check(again->model.num_layers == options->num_layers);
  Check(again->model.num_heads == options->num_heads);
  Check(again->model.num_kv_heads == options->num_kv_heads);
  Check(again->model.vocab_size == options->vocab_size);
  Check(again->model.HeadDim() == options->HeadDim());
  return 0;
}
