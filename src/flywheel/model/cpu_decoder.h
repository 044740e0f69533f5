// A hand-written float32 CPU forward of the policy for incremental decoding: the rollout engine's
// fast path when the weights are float32 on the CPU. At the sizes an actor runs on a CPU, a decode
// step through LibTorch ops is dominated by per-op overhead (dispatch, allocation, one small GEMM
// per (sequence, kv head) for attention) rather than arithmetic; this path does the same
// arithmetic in one pass over preallocated buffers:
//
//   rows (slot, position, token) ── embed ─▶ x [n, hidden]
//   per layer: RMSNorm ─▶ one fused q|k|v GEMM (─▶ per-head q/k RMSNorm with qk_norm) ─▶
//              RoPE (table, with the model's frequency scaling) ─▶ k, v written in place into the
//              slot at the row's position ─▶ ragged attention, each row over positions [0, pos]
//              of its own slot (no mask, no padding) ─▶ o_proj GEMM added onto x ─▶ RMSNorm ─▶
//              one fused gate|up GEMM ─▶ silu·up ─▶ down GEMM added onto x
//   rows that want logits: final RMSNorm ─▶ LM head GEMM ─▶ logits [m, V]
//
// GEMMs run over weights packed once per snapshot (PackedLinear); o_proj and down_proj add
// straight onto the residual stream. The float loops are model/simd_kernels.h (Highway, the
// best vector target of the CPU chosen at run time). Prefill and decode are the same call: a
// sequence with several pending tokens contributes one row per token; because every row's keys
// are stored before any row attends, a row sees the earlier rows of its own sequence (causal) and
// nothing else.
//
// Exactness: the same formulas as TransformerImpl::Hidden/Logits in float32 (the RoPE table is
// computed by MakeRotary itself); results differ from the LibTorch path only by summation order,
// far below the 1e-5 the tests demand.
//
//   cache layer l: keys   [slots, kv_heads, capacity/16, head_dim, 16]  (tiles of 16 positions:
//                  values [slots, kv_heads, capacity, head_dim]         q·kᵀ reads contiguous
//                                                                       memory, 16 scores a FMA)
//
// Not thread-safe: one owner (an actor's rollout engine). The weights it reads belong to a
// snapshot that is never modified, so engines on many threads may share one snapshot.
#ifndef FLYWHEEL_MODEL_CPU_DECODER_H_
#define FLYWHEEL_MODEL_CPU_DECODER_H_

#include <cstdint>
#include <span>
#include <vector>

#include <torch/torch.h>

#include "flywheel/model/model_options.h"
#include "flywheel/model/simd_kernels.h"
#include "flywheel/model/transformer.h"

namespace flywheel {

// One token of a forward: it is stored in `slot` at `position` and attends to positions
// [0, position] of that slot.
struct DecodeRow {
  int64_t slot = 0;
  int64_t position = 0;
  int64_t token = 0;
};

// The weight of a linear layer y = x·Wᵀ (W [n, k], as torch::nn::Linear) packed for the CPU
// decoder's GEMM: column blocks of kPackWidth outputs, each [k][kPackWidth] contiguous (the
// last zero-padded), so a tile of outputs reads one contiguous block row by row. Packed once
// per snapshot; a BLAS call would repack W at every call, which at decode sizes costs as much as
// the product.
struct PackedLinear {
  static constexpr int64_t kPackWidth = simd::kPackWidth;
  int64_t n = 0;            // outputs
  int64_t k = 0;            // inputs
  std::vector<float> data;  // [ceil(n / kPackWidth)][k][kPackWidth]
  static PackedLinear Pack(const torch::Tensor& weight);
};

// A snapshot's weights in the layout the CPU decoder reads (fused, packed q|k|v and gate|up
// copies; everything contiguous float32). Holds references to the tensors it reads.
struct CpuDecoderWeights {
  struct Layer {
    torch::Tensor input_norm, qkv_bias, post_norm;
    torch::Tensor q_norm, k_norm;  // [head_dim]; undefined without qk_norm
    PackedLinear qkv, o_proj, gate_up, down;  // q|k|v and gate|up fused
  };
  std::vector<Layer> layers;
  torch::Tensor embed, final_norm;
  PackedLinear lm_head;

  // Whether `model` can run on the CPU decoder (float32 parameters on the CPU).
  static bool Supports(const Transformer& model);
  // Copies/fuses `model`'s parameters. Requires Supports(model).
  static CpuDecoderWeights From(const Transformer& model);
};

class CpuDecoder {
 public:
  CpuDecoder(const ModelOptions& options, int64_t initial_slots, int64_t initial_capacity);

  int64_t num_slots() const { return slots_; }
  int64_t capacity() const { return capacity_; }
  // Grows (never shrinks) so that `slots` slots of `length` positions fit; keeps contents.
  void Reserve(int64_t slots, int64_t length);
  // Copies positions [0, length) of slot `from` into slot `to` (compaction after a removal).
  void MoveSlot(int64_t from, int64_t to, int64_t length);

  // Runs `rows` through the model: stores their keys/values and writes the logits of the rows
  // listed in `logit_rows` (indices into `rows`) to `logits` [logit_rows.size(), vocab].
  // Positions [0, position) of each row's slot must already be in the cache or be earlier rows
  // of this call; the cache must have room (Reserve) for every position.
  void Forward(const CpuDecoderWeights& weights, std::span<const DecodeRow> rows,
               std::span<const int64_t> logit_rows, float* logits);

 private:
  float* Keys(int64_t layer, int64_t slot, int64_t kv_head);    // [capacity/16, head_dim, 16]
  float* Values(int64_t layer, int64_t slot, int64_t kv_head);  // [capacity, head_dim]
  // Attention of one row (all heads); fetches next_row's keys/values meanwhile.
  void Attend(int64_t layer, const DecodeRow& row, const DecodeRow* next_row, const float* q,
              float* out);

  ModelOptions options_;
  int64_t head_dim_;
  int64_t slots_;
  int64_t capacity_;                        // a multiple of 16
  std::vector<float> keys_;                 // [layers][slots][kv_heads][capacity/16][head_dim][16]
  std::vector<float> values_;               // [layers][slots][kv_heads][capacity][head_dim]
  std::vector<float> rope_cos_, rope_sin_;  // [max_seq_len, head_dim], from MakeRotary
  // Scratch reused by every Forward (no allocation per step once grown).
  std::vector<float> x_, h_, qkv_, att_, gate_up_, act_, scores_, final_, head_norm_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_CPU_DECODER_H_
