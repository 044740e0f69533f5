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
// Many short documents make that loop of small operations slower than the dense matrix it
// avoids (rows of 64 tokens holding 4 guess episodes: a guess learner step takes 0.064 s so,
// 0.039 s with the dense matrix, on the 2-core development machine), and a tree segment scores
// every branch against every other before masking. A third path cuts the rows into chunks of
// query tokens, each against only the keys it may read, in a few batched products
// (chunk_attention.h): a tree's tokens then cost about what their flat paths' tokens would. On
// the CPU each forward takes the cheapest (chunks for tree segments only), from costs measured
// once per head shape; all give the same values and gradients.
//
// Training-only helper of the transformer's packed forward; gradients flow through autograd.
#ifndef FLYWHEEL_MODEL_DOCUMENT_ATTENTION_H_
#define FLYWHEEL_MODEL_DOCUMENT_ATTENTION_H_

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "flywheel/model/chunk_attention.h"

namespace flywheel {

// How DocumentAttention computes: the cheapest (the default), or one path: whole documents, dense
// rows, or (tests) chunks of 4 query tokens (chunk_attention.h).
enum class DocumentPath { kCheaper, kPerDocument, kDenseRows, kChunks };

// What the CPU path chose for a set of documents, and its chunks: decided by the first layer's
// call, reused by the others (every layer of a forward attends the same documents).
struct DocumentsPlan {
  bool decided = false;
  DocumentPath path = DocumentPath::kPerDocument;
  ChunkPlan chunks;
};

// The documents of packed rows, and how each attends within itself.
struct Documents {
  std::vector<std::vector<int64_t>> lengths;  // row b's documents from position 0
  // Undefined: causal within each document. Else [B, L, L] bool (AttentionLayout::allowed): a
  // document's tokens attend as its diagonal block says; nothing outside the blocks is read.
  torch::Tensor mask;
  std::shared_ptr<DocumentsPlan> plan = std::make_shared<DocumentsPlan>();
};

// q [B, L, heads, D], k and v [B, L, kv_heads, D] (token-major, as the projections produce them;
// heads a multiple of kv_heads, query head h reads kv head h / (heads / kv_heads) as HF's
// repeat_kv). documents.lengths[b] are row b's documents from position 0; the rest of the row is
// padding. Returns softmax(q kᵀ · scale + mask per document) v as [B, L, heads · D]. Throws
// c10::Error (TORCH_CHECK) on shapes that do not match or documents that overflow a row.
torch::Tensor DocumentAttention(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, const Documents& documents, double scale,
                                DocumentPath path = DocumentPath::kCheaper);

// Whether the rows of q ([B, L, heads, D]) holding `doc_lengths` are attended faster as dense
// [L, L] matrices (B · L² score entries) than document by document (Σ n² entries plus a fixed
// cost per document): the two per-entry and per-document costs are measured for q's dtype the
// first time a head shape is seen (a few milliseconds), then reused. CPU only: on an accelerator
// (fused kernels, asynchronous timing) it is false.
bool DenseIsCheaper(const torch::Tensor& q, int64_t kv_heads,
                    const std::vector<std::vector<int64_t>>& doc_lengths);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_DOCUMENT_ATTENTION_H_
