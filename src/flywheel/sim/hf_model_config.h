// The cost model's [workload.model] from a Hugging Face `config.json` (Llama, Mistral, Qwen2,
// Qwen3: dense decoder-only transformers with SwiGLU MLPs and RMSNorm), so a simulation can name
// the model it serves instead of restating its size:
//
//   [workload.model]
//   hf_config = "models/qwen2.5-7b/config.json"   # relative to the TOML file's directory
//
// With V vocab_size, h hidden_size, L num_hidden_layers, H num_attention_heads, K
// num_key_value_heads (default H), D head_dim (default h / H), I intermediate_size, b the bytes
// of torch_dtype (or dtype; default bfloat16):
//
//   params = V·h · (tie_word_embeddings ? 1 : 2)                   embeddings, LM head
//          + L · ( h·H·D + 2·h·K·D + H·D·h                          q, k, v, o projections
//                + [attention_bias] (H·D + 2·K·D)                  q/k/v biases (Qwen2)
//                + [qwen3] 2·D                                     per-head q/k RMSNorm
//                + 3·h·I                                           SwiGLU gate, up, down
//                + 2·h )                                           the two RMSNorms
//          + h                                                     the final RMSNorm
//   kv_bytes_per_token = 2 · L · K · D · b                         K and V of every layer
//   bytes_per_param    = b
//
// attention_bias is read when the file has it; Qwen2 configs leave it out and have the biases
// (model_type "qwen2"). Mixture-of-experts configs are refused: their active and total
// parameters differ, which this cost model does not represent.
#ifndef FLYWHEEL_SIM_HF_MODEL_CONFIG_H_
#define FLYWHEEL_SIM_HF_MODEL_CONFIG_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/sim/cost_model.h"

namespace flywheel::sim {

// What the cost model takes from a config.json.
struct HfModelShape {
  std::string model_type;  // "" when the file has none
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate = 0;
  int64_t vocab = 0;
  bool tied_embeddings = false;
  bool attention_bias = false;
  bool qk_norm = false;  // Qwen3
  int64_t bytes_per_element = 2;

  double params() const;
  double kv_bytes_per_token() const;
  std::string DebugString() const;
};

// Parses the text of a config.json; errors name `source` and the field.
absl::StatusOr<HfModelShape> ParseHfModelConfig(std::string_view json_text,
                                                std::string_view source);
absl::StatusOr<HfModelShape> ReadHfModelConfig(const std::filesystem::path& file);

// The [workload.model] keys an hf_config derives; giving one of them as well is an error.
inline constexpr std::string_view kHfDerivedModelKeys[] = {"params", "layers", "hidden",
                                                           "kv_bytes_per_token", "bytes_per_param"};

// Reads `model.hf_config` (relative paths from `base_dir`), fills the derived keys and clears
// hf_config, so the effective config states the figures and loads back on its own.
absl::Status ApplyHfConfig(const std::filesystem::path& base_dir, ModelCostOptions& model);

}  // namespace flywheel::sim

#endif  // FLYWHEEL_SIM_HF_MODEL_CONFIG_H_
