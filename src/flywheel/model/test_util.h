// Test helpers for the model: a transformer small enough that exact-equality tests (cached vs
// recomputed, packed vs one by one, bit-exact round trips) run in milliseconds. Tests change
// the fields they are about on the returned options.
#ifndef FLYWHEEL_MODEL_TEST_UTIL_H_
#define FLYWHEEL_MODEL_TEST_UTIL_H_

#include <cstdint>

#include "flywheel/model/model_options.h"

namespace flywheel::testing {

// 40 tokens, hidden 32, 2 layers, 4 query heads over 2 key/value heads (grouped-query).
inline ModelOptions TinyModelOptions(int64_t seed = 3) {
  ModelOptions o;
  o.vocab_size = 40;
  o.hidden_size = 32;
  o.num_layers = 2;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.intermediate_size = 48;
  o.max_seq_len = 64;
  o.seed = seed;
  return o;
}

// TinyModelOptions in the Qwen3 shape: per-head q/k RMSNorm, head_dim 12 (q/k/v project to 48,
// not hidden 32), and Llama 3 rope scaling whose three frequency bands (kept, interpolated,
// divided) all occur among the 6 frequencies.
inline ModelOptions TinyQwen3StyleOptions(int64_t seed = 3) {
  ModelOptions o = TinyModelOptions(seed);
  o.qk_norm = true;
  o.head_dim = 12;
  o.rope_scaling.type = "llama3";
  o.rope_scaling.factor = 8;
  o.rope_scaling.low_freq_factor = 1;
  o.rope_scaling.high_freq_factor = 4;
  o.rope_scaling.original_max_position_embeddings = 32;
  return o;
}

}  // namespace flywheel::testing

#endif  // FLYWHEEL_MODEL_TEST_UTIL_H_
