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

}  // namespace flywheel::testing

#endif  // FLYWHEEL_MODEL_TEST_UTIL_H_
