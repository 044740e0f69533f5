// Where a forward pass keeps and finds the keys/values of its attention layers. A forward
// without a store attends within its own input (training, scoring); with one, the new tokens'
// keys/values are stored and the queries attend to everything the store holds for their row
// (decoding against a KV cache). The attention code is the same in both cases.
#ifndef FLYWHEEL_MODEL_KV_STORE_H_
#define FLYWHEEL_MODEL_KV_STORE_H_

#include <cstdint>
#include <utility>

#include <torch/torch.h>

namespace flywheel {

class KvStore {
 public:
  virtual ~KvStore() = default;
  // Stores the new keys/values `k`, `v` [B, kv_heads, Lq, head_dim] of layer `layer` (after the
  // rotary embedding) and returns those the queries attend to: keys TRANSPOSED,
  // [B, kv_heads, head_dim, Lk], and values [B, kv_heads, Lk, head_dim]. Transposed keys let a
  // cache hand q·kᵀ a layout the batched matmul takes without a copy (about 3x faster decode
  // attention on CPU than transposing a [.., Lk, head_dim] view).
  virtual std::pair<torch::Tensor, torch::Tensor> Update(int64_t layer, const torch::Tensor& k,
                                                         const torch::Tensor& v) = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_KV_STORE_H_
