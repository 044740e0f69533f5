// Which token may attend to which, and where each token sits for rotary embeddings: the one
// description every attention call in flywheel takes (training on causal rows, packed documents
// and trajectory trees; decoding against a KV cache). There is no separate "causal" code path:
// the transformer only ever sees `positions` and `allowed`.
//
//   causal row        packed row (docs 3, 2, pad)     tree (parents -1, 0, 1, 1)
//   pos 0 1 2 3       pos 0 1 2 0 1 0                 pos 0 1 2 2
//   1 . . .           1 . . . . .                     1 . . .
//   1 1 . .           1 1 . . . .                     1 1 . .
//   1 1 1 .           1 1 1 . . .                     1 1 1 .
//   1 1 1 1           . . . 1 . .                     1 1 . 1    (siblings 2 and 3 do not see
//                     . . . 1 1 .                                  each other)
//                     . . . . . 1   <- padding: itself only, position 0
#ifndef FLYWHEEL_MODEL_ATTENTION_LAYOUT_H_
#define FLYWHEEL_MODEL_ATTENTION_LAYOUT_H_

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace flywheel {

struct AttentionLayout {
  torch::Tensor positions;  // [B, L] int64 rotary positions
  torch::Tensor allowed;    // [B, L, L] bool: allowed[b][i][j] = token i may attend to token j
  // Row b's documents: PackedLayout's (whose block-diagonal causal mask `allowed` is) or
  // TreeLayout's tree segments (runs of tokens no later token attends across). The transformer's
  // training forward then attends within each document (DocumentAttention) instead of scoring
  // the dense [L, L] mask; empty for causal rows. Clear it to take the dense path.
  std::vector<std::vector<int64_t>> doc_lengths;
  // The documents attend through their diagonal blocks of `allowed` (tree segments), not causally.
  bool documents_masked = false;
};

// Plain causal rows, positions 0..length-1.
AttentionLayout CausalLayout(int64_t batch, int64_t length);

// Row b holds documents of doc_lengths[b] back to back from position 0; positions restart at 0
// per document; block-diagonal causal. The rest of the row is padding: attends only to itself,
// position 0. Throws c10::Error (via TORCH_CHECK) when a row's documents exceed `length` or a
// document length is not positive; ValidatePackedLayout returns that as a Status instead.
AttentionLayout PackedLayout(const std::vector<std::vector<int64_t>>& doc_lengths, int64_t length);

// parents[b][i] = index (< i) of token i's parent in row b, -1 for a root; token i attends to
// itself and its ancestors; position = depth. Entries past parents[b].size() are padding as
// above. doc_lengths are the row's tree segments (a new one starts where no later token has a
// parent before it), documents_masked: a packed row of trees costs Σ n_tree² in attention. Throws c10::Error for a parent that is not earlier in the row or a row longer than
// `length`.
AttentionLayout TreeLayout(const std::vector<std::vector<int64_t>>& parents, int64_t length);

// Status-returning forms for input that comes from outside (trajectories, packers).
absl::StatusOr<AttentionLayout> MakePackedLayout(
    const std::vector<std::vector<int64_t>>& doc_lengths, int64_t length);
absl::StatusOr<AttentionLayout> MakeTreeLayout(const std::vector<std::vector<int64_t>>& parents,
                                               int64_t length);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_ATTENTION_LAYOUT_H_
