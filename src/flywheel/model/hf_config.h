// A Hugging Face model directory's config.json as flywheel's ModelOptions, for the three
// architectures the transformer computes exactly:
//
//   LlamaForCausalLM   (model_type llama)  q/k/v bias with attention_bias, Llama 3 rope_scaling
//   Qwen2ForCausalLM   (model_type qwen2)  q/k/v bias always
//   Qwen3ForCausalLM   (model_type qwen3)  per-head q/k RMSNorm, head_dim apart from hidden/heads
//
//   config.json key                    ModelOptions
//   vocab_size, hidden_size            vocab_size, hidden_size
//   intermediate_size                  intermediate_size
//   num_hidden_layers                  num_layers
//   num_attention_heads                num_heads
//   num_key_value_heads (absent=heads) num_kv_heads
//   head_dim (absent/null=hidden/heads) head_dim
//   rope_theta, rope_scaling           rope_theta, rope_scaling (llama3 or none; transformers v5's
//     (or rope_parameters)             rope_parameters with rope_theta inside is read too)
//   rms_norm_eps                       rms_norm_eps
//   tie_word_embeddings                tie_embeddings
//   attention_bias / Qwen2             attention_bias
//   Qwen3                              qk_norm
//   max_position_embeddings            max_seq_len (a job may ask for less, not more)
//
// Strict by design: a model computed with other maths than the checkpoint's is worse than an
// error. Every key is either understood, known to be harmless (metadata, token ids, inference
// flags), or refused with an error naming it: keys that change the maths when set to an active
// value (sliding windows, mixture-of-experts, other rope scalings, an activation other than
// silu, MLP bias, attention dropout, quantisation) and keys this parser does not know.
#ifndef FLYWHEEL_MODEL_HF_CONFIG_H_
#define FLYWHEEL_MODEL_HF_CONFIG_H_

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/model/model_options.h"

namespace flywheel {

struct HfModelConfig {
  std::string source;        // the config.json read, for messages
  std::string architecture;  // "LlamaForCausalLM", "Qwen2ForCausalLM" or "Qwen3ForCausalLM"
  std::string model_type;    // "llama", "qwen2" or "qwen3"
  // The shape; max_seq_len = max_position_embeddings, path and seed left at their defaults.
  ModelOptions model;
  int64_t max_position_embeddings = 0;
  // torch_dtype (or transformers >= 4.56's dtype): the dtype the checkpoint was published in,
  // "bfloat16", "float16" or "float32"; empty when the file has neither.
  std::string torch_dtype;
  std::vector<int64_t> eos_token_ids;  // config.json's eos_token_id (int or list); may be empty
  nlohmann::json json;                 // the file as read (flywheel export writes it back)
};

// Parses the text of a config.json; errors name `source` and the key.
absl::StatusOr<HfModelConfig> ParseHfModelConfig(std::string_view json_text,
                                                 std::string_view source);
// Reads dir/config.json.
absl::StatusOr<HfModelConfig> LoadHfModelConfig(const std::filesystem::path& dir);

// The job's [model] options with the shape taken from `hf`. A shape key the job config set to a
// value other than its default and other than config.json's is an error naming both values;
// max_seq_len stays the job's and may not exceed max_position_embeddings. path, seed and
// max_seq_len come from `job`.
absl::StatusOr<ModelOptions> ApplyHfModelConfig(const ModelOptions& job, const HfModelConfig& hf);

// A config.json for a model flywheel initialised itself: LlamaForCausalLM, or Qwen3ForCausalLM
// when it has per-head q/k norms (Llama has none); max_position_embeddings = max_seq_len.
nlohmann::json HfConfigJsonFor(const ModelOptions& options, std::string_view torch_dtype);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_HF_CONFIG_H_
