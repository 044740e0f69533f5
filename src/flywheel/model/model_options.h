// Shape of the policy transformer (Llama / Qwen2 / Qwen3 family). Maps to the [model] section of
// a job config. With `path` set, the shape comes from the Hugging Face model directory's
// config.json instead (hf_config.h) and the initial weights from its safetensors (hf_weights.h).
#ifndef FLYWHEEL_MODEL_MODEL_OPTIONS_H_
#define FLYWHEEL_MODEL_MODEL_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "flywheel/core/strings.h"

namespace flywheel {

// Rotary-embedding frequency scaling ([model.rope_scaling]). "llama3" is Llama 3.1's: the
// inverse frequencies of wavelengths above original_max_position_embeddings / low_freq_factor
// are divided by `factor`, those below original_max_position_embeddings / high_freq_factor are
// kept, and those in between interpolate smoothly (rope_scaling.h).
struct RopeScalingOptions {
  std::string type = "none";  // "none" | "llama3"
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;

  template <typename V>
  void VisitFields(V& v) {
    v.Field("type", type, "none | llama3 (Llama 3.1 frequency scaling)");
    v.Field("factor", factor, "llama3: divisor of the low frequencies");
    v.Field("low_freq_factor", low_freq_factor, "llama3: wavelengths above original / this scale");
    v.Field("high_freq_factor", high_freq_factor, "llama3: wavelengths below original / this stay");
    v.Field("original_max_position_embeddings", original_max_position_embeddings,
            "llama3: the context length the frequencies were trained for");
  }

  bool enabled() const { return type != "none"; }
  bool operator==(const RopeScalingOptions&) const = default;

  absl::Status Validate() const {
    if (type == "none") return absl::OkStatus();
    if (type != "llama3") {
      return absl::InvalidArgumentError(StrCat("model.rope_scaling.type = \"", type,
                                               "\" is not supported (none, llama3)"));
    }
    if (!(factor > 0) || !(low_freq_factor > 0) || !(high_freq_factor > low_freq_factor) ||
        original_max_position_embeddings <= 0) {
      return absl::InvalidArgumentError(StrCat(
          "model.rope_scaling (llama3) needs factor > 0, 0 < low_freq_factor < high_freq_factor "
          "and original_max_position_embeddings > 0; got factor ",
          factor, ", low_freq_factor ", low_freq_factor, ", high_freq_factor ", high_freq_factor,
          ", original_max_position_embeddings ", original_max_position_embeddings));
    }
    return absl::OkStatus();
  }
};

struct ModelOptions {
  // A Hugging Face model directory (config.json, model.safetensors or a sharded index): the
  // shape comes from its config.json and the initial weights from its files. Empty = the shape
  // below and a random initialisation from `seed`.
  std::string path;
  // 0 = take the vocabulary size from the environment's tokenizer.
  int64_t vocab_size = 0;
  int64_t hidden_size = 128;
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 4;  // < num_heads: grouped-query attention
  // Width of one attention head; 0 = hidden_size / num_heads. Qwen3 sets it independently
  // (Qwen3-0.6B: hidden 1024, 16 heads of 128), so q/k/v project to heads * head_dim.
  int64_t head_dim = 0;
  int64_t intermediate_size = 344;
  int64_t max_seq_len = 1024;
  double rope_theta = 10000.0;
  RopeScalingOptions rope_scaling;
  double rms_norm_eps = 1e-5;
  bool tie_embeddings = true;
  bool attention_bias = false;  // bias on q/k/v projections (Qwen2); Llama has none
  bool qk_norm = false;  // RMSNorm over each query and key head before RoPE (Qwen3)
  int64_t seed = 0;      // initialisation seed
  // Where the model computes (placement.h): "cpu", "cuda" (the current CUDA device) or "cuda:N".
  std::string device = "cpu";
  // The precision it computes in: "float32", or "bfloat16" — the learner then keeps float32
  // master weights and optimiser state and runs its forward under autocast; the rollout engine
  // decodes with bfloat16 copies of the weights and a bfloat16 KV cache.
  std::string dtype = "float32";

  template <typename V>
  void VisitFields(V& v) {
    v.Field("path", path,
            "Hugging Face model directory: shape from its config.json, initial weights from its "
            "safetensors (empty = random initialisation)");
    v.Field("vocab_size", vocab_size, "0 = from the environment's tokenizer");
    v.Field("hidden_size", hidden_size, "residual stream width");
    v.Field("num_layers", num_layers, "decoder layers");
    v.Field("num_heads", num_heads, "attention heads");
    v.Field("num_kv_heads", num_kv_heads, "key/value heads (< num_heads: grouped-query)");
    v.Field("head_dim", head_dim, "width of one attention head (0 = hidden_size / num_heads)");
    v.Field("intermediate_size", intermediate_size, "SwiGLU hidden width");
    v.Field("max_seq_len", max_seq_len, "longest sequence the model serves");
    v.Field("rope_theta", rope_theta, "rotary embedding base");
    v.Field("rms_norm_eps", rms_norm_eps, "RMSNorm epsilon");
    v.Field("tie_embeddings", tie_embeddings, "share the embedding and LM head weights");
    v.Field("attention_bias", attention_bias, "bias on q/k/v projections (Qwen2 style)");
    v.Field("qk_norm", qk_norm, "RMSNorm over each query and key head before RoPE (Qwen3 style)");
    v.Field("seed", seed, "initialisation seed");
    v.Field("device", device, "cpu | cuda | cuda:N (a CUDA build of LibTorch and a GPU)");
    v.Field("dtype", dtype,
            "float32 | bfloat16 (float32 master weights; bfloat16 matmuls and KV cache)");
    v.Section("rope_scaling", rope_scaling);
  }

  // The width of one head: head_dim, or hidden_size / num_heads when it is 0.
  int64_t HeadDim() const { return head_dim > 0 ? head_dim : hidden_size / num_heads; }

  absl::Status Validate() const {
    if (vocab_size < 0) return absl::InvalidArgumentError("model.vocab_size must be >= 0");
    if (hidden_size <= 0 || num_layers <= 0 || num_heads <= 0 || num_kv_heads <= 0 ||
        intermediate_size <= 0 || max_seq_len <= 0) {
      return absl::InvalidArgumentError(
          "model.hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size and "
          "max_seq_len must be > 0");
    }
    if (head_dim < 0) {
      return absl::InvalidArgumentError(
          StrCat("model.head_dim = ", head_dim, ": must be > 0, or 0 for hidden_size / num_heads"));
    }
    if (head_dim == 0 && hidden_size % num_heads != 0) {
      return absl::InvalidArgumentError(StrCat("model.hidden_size (", hidden_size,
                                               ") must be divisible by model.num_heads (",
                                               num_heads, "), or set model.head_dim"));
    }
    if (HeadDim() % 2 != 0) {
      return absl::InvalidArgumentError(
          StrCat("model.head_dim (", HeadDim(),
                 ", or hidden_size / num_heads) must be even (rotary embeddings rotate pairs)"));
    }
    if (device != "cpu" && device != "cuda" &&
        !(device.starts_with("cuda:") && device.size() > 5 &&
          device.find_first_not_of("0123456789", 5) == std::string::npos)) {
      return absl::InvalidArgumentError(
          StrCat("model.device = \"", device, "\": use \"cpu\", \"cuda\" or \"cuda:N\""));
    }
    if (dtype != "float32" && dtype != "bfloat16") {
      return absl::InvalidArgumentError(
          StrCat("model.dtype = \"", dtype, "\": use \"float32\" or \"bfloat16\""));
    }
    if (num_heads % num_kv_heads != 0) {
      return absl::InvalidArgumentError(StrCat("model.num_heads (", num_heads,
                                               ") must be a multiple of model.num_kv_heads (",
                                               num_kv_heads, ")"));
    }
    return rope_scaling.Validate();
  }
};

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_MODEL_OPTIONS_H_
