// Shape of the policy transformer (Llama family). Maps to the [model] section of a job config.
#ifndef FLYWHEEL_MODEL_MODEL_OPTIONS_H_
#define FLYWHEEL_MODEL_MODEL_OPTIONS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "flywheel/core/strings.h"

namespace flywheel {

struct ModelOptions {
  // 0 = take the vocabulary size from the environment's tokenizer.
  int64_t vocab_size = 0;
  int64_t hidden_size = 128;
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 4;  // < num_heads: grouped-query attention
  int64_t intermediate_size = 344;
  int64_t max_seq_len = 1024;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  bool tie_embeddings = true;
  bool attention_bias = false;  // bias on q/k/v projections (Qwen2); Llama has none
  int64_t seed = 0;  // initialisation seed

  template <typename V>
  void VisitFields(V& v) {
    v.Field("vocab_size", vocab_size, "0 = from the environment's tokenizer");
    v.Field("hidden_size", hidden_size, "residual stream width");
    v.Field("num_layers", num_layers, "decoder layers");
    v.Field("num_heads", num_heads, "attention heads");
    v.Field("num_kv_heads", num_kv_heads, "key/value heads (< num_heads: grouped-query)");
    v.Field("intermediate_size", intermediate_size, "SwiGLU hidden width");
    v.Field("max_seq_len", max_seq_len, "longest sequence the model serves");
    v.Field("rope_theta", rope_theta, "rotary embedding base");
    v.Field("rms_norm_eps", rms_norm_eps, "RMSNorm epsilon");
    v.Field("tie_embeddings", tie_embeddings, "share the embedding and LM head weights");
    v.Field("attention_bias", attention_bias, "bias on q/k/v projections (Qwen2 style)");
    v.Field("seed", seed, "initialisation seed");
  }

  int64_t head_dim() const { return hidden_size / num_heads; }

  absl::Status Validate() const {
    if (vocab_size < 0) return absl::InvalidArgumentError("model.vocab_size must be >= 0");
    if (hidden_size <= 0 || num_layers <= 0 || num_heads <= 0 || num_kv_heads <= 0 ||
        intermediate_size <= 0 || max_seq_len <= 0) {
      return absl::InvalidArgumentError(
          "model.hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size and "
          "max_seq_len must be > 0");
    }
    if (hidden_size % num_heads != 0) {
      return absl::InvalidArgumentError(StrCat("model.hidden_size (", hidden_size,
                                                     ") must be divisible by model.num_heads (",
                                                     num_heads, ")"));
    }
    if ((hidden_size / num_heads) % 2 != 0) {
      return absl::InvalidArgumentError(
          "model.hidden_size / model.num_heads must be even (rotary embeddings rotate pairs)");
    }
    if (num_heads % num_kv_heads != 0) {
      return absl::InvalidArgumentError(StrCat("model.num_heads (", num_heads,
                                                     ") must be a multiple of model.num_kv_heads (",
                                                     num_kv_heads, ")"));
    }
    return absl::OkStatus();
  }
};

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_MODEL_OPTIONS_H_
