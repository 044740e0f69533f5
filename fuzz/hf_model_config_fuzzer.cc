// A Hugging Face config.json (sim/hf_model_config.h), downloaded with a model and read by the
// cost model (`flywheel plan`, `flywheel sim`). A shape that parses is described and its
// parameter count and KV cache size computed, as the planner does.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "flywheel/sim/hf_model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<flywheel::sim::HfModelShape> shape =
      flywheel::sim::ParseHfModelConfig(text, "config.json");
  if (!shape.ok()) return 0;
  shape->params();
  shape->kv_bytes_per_token();
  shape->DebugString();
  return 0;
}
