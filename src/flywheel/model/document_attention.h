// Attention within the documents of packed rows, computed document by document instead of as a
// dense [L, L] score matrix with a -inf mask: causal within each document (the block-diagonal
// layout of PackedLayout), or, with a mask, through each document's diagonal block of it (the tree
// segments of TreeLayout: a token attends to its ancestors, and no token attends across trees). A
// row of length L holding documents n_1, n_2, … costs Σ n_i² score entries instead of L², and
// padding costs none: a padding token attends only to itself, so its output is its own value
// vector, exactly as the dense softmax over one allowed key gives.
//
//   row:    [ doc a (n=3) | doc b (n=2) | pad ]      dense: one 6x6 score matrix, mostly -inf
//   here:   softmax(q_a k_aᵀ·s + causal₃) v_a,  softmax(q_b k_bᵀ·s + causal₂) v_b,  v_pad
//           (with a mask: + its block of a instead of causal₃, of b instead of causal₂)
//
// Training-only helper of the transformer's packed forward; gradients flow through autograd.
#ifndef FLYWHEEL_MODEL_DOCUMENT_ATTENTION_H_
#define FLYWHEEL_MODEL_DOCUMENT_ATTENTION_H_

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace flywheel {

// The documents of packed rows, and how each attends within itself.
struct Documents {
  std::vector<std::vector<int64_t>> lengths;  // row b's documents from position 0
  // Undefined: causal within each document. Else [B, L, L] bool (AttentionLayout::allowed): a
  // document's tokens attend as its diagonal block says; nothing outside the blocks is read.
  torch::Tensor mask;
};

// q [B, L, heads, D], k and v [B, L, kv_heads, D] (token-major, as the projections produce them;
// heads a multiple of kv_heads, query head h reads kv head h / (heads / kv_heads) as HF's
// repeat_kv). documents.lengths[b] are row b's documents from position 0; the rest of the row is
// padding. Returns softmax(q kᵀ · scale + mask per document) v as [B, L, heads · D]. Throws
// c10::Error (TORCH_CHECK) on shapes that do not match or documents that overflow a row.
torch::Tensor DocumentAttention(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, const Documents& documents, double scale);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_DOCUMENT_ATTENTION_H_
