// Attention over packed rows in chunks of consecutive query tokens, each chunk against only the
// keys its queries may read, and all chunks of about the same number of keys in one batched
// product. The documents of a row (causal, or the tree segments of TreeLayout) are cut into chunks
// of C tokens; a chunk reads
//   - causal documents: from the start of the document its first token is in, to its last token;
//   - tree segments: the union of its tokens' ancestors (and themselves). A tree's branches read
//     their shared prefix and themselves, never each other, so a chunk inside one branch reads
//     about what the same tokens read on their own flat path.
// So a token costs about as many score entries as it has keys to read: a tree's tokens cost what
// their paths' tokens would, where a whole tree segment of n tokens attended at once costs n²
// (every branch scored against every other, then masked). The chunks are gathered with one
// index_select per tensor and batch, so the number of operations does not grow with the number
// of documents or chunks.
//
//   row:  [ doc a: 0 1 2 3 4 | doc b: 5 6 7 | pad ]     C = 4
//   chunk [0, 4): keys 0..3, causal     chunk [4, 8): keys 0..7 (4 reads doc a, 5..7 doc b)
//
// Training helper of DocumentAttention (document_attention.h), which plans once per forward and
// chooses this path for tree segments where its measured cost is lowest.
#ifndef FLYWHEEL_MODEL_CHUNK_ATTENTION_H_
#define FLYWHEEL_MODEL_CHUNK_ATTENTION_H_

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace flywheel {

// One batched product: `chunks` chunks of the plan's `chunk` query slots, each reading `keys` key
// slots. Slots a chunk does not fill read nothing (empty query slots read key slot 0 only, so that
// their softmax is defined; their output is never used).
struct ChunkBatch {
  int64_t chunks = 0, keys = 0;
  torch::Tensor queries;  // [chunks · chunk] int64: flat token index (b·L + t) of each query slot
  torch::Tensor key_index;  // [chunks · keys] int64: flat token index of each key slot
  // [chunks, 1, 1, chunk, keys] float: 0 where the query slot may read the key slot, else -inf
  // (broadcast over kv heads and their query heads).
  torch::Tensor additive;
};

struct ChunkPlan {
  int64_t chunk = 0;  // C: query tokens a chunk
  std::vector<ChunkBatch> batches;
  // [B · L] int64: the row of cat(the batches' query slots…, the B · L tokens' own values) that is
  // token t's output (padding outputs its own value, as the dense softmax over itself gives).
  torch::Tensor source;
  double entries = 0;  // score entries per head, empty slots included
};

// The rows' documents cut into chunks of `chunk` query tokens, the keys each reads, and the
// batches they are computed in: what a plan costs, and what PlanChunks builds it from.
// lengths[b]: row b's documents from position 0; mask: undefined (causal documents) or [B, L, L]
// bool on the CPU, contiguous. Throws c10::Error for a mask of another shape.
struct ChunkCut {
  struct Chunk {
    int64_t row = 0, first = 0, size = 0;  // query tokens [first, first + size) of row `row`
    std::vector<int64_t> keys;             // the row positions they read, ascending
  };
  int64_t chunk = 0, length = 0;  // C, and the rows' length L
  // doc_starts[b][t]: the first token of the document holding token t of row b (t < row b's
  // documents' total)
  std::vector<std::vector<int64_t>> doc_starts;
  std::vector<Chunk> chunks;
  // Chunks sorted by keys read, most first; a new batch where a chunk reads under two thirds of
  // its batch's first, so that padding the key slots wastes at most a third.
  std::vector<std::vector<size_t>> batches;
  double entries = 0;  // score entries per head, empty slots included
};
ChunkCut CutChunks(const std::vector<std::vector<int64_t>>& lengths, const torch::Tensor& mask,
                   int64_t length, int64_t chunk);

// `cut`'s index and mask tensors (`mask`: the one cut was made with), or cut and planned.
ChunkPlan PlanChunks(const ChunkCut& cut, const torch::Tensor& mask);
ChunkPlan PlanChunks(const std::vector<std::vector<int64_t>>& lengths, const torch::Tensor& mask,
                     int64_t length, int64_t chunk);

// q [B, L, heads, D], k and v [B, L, kv_heads, D] (query head h reads kv head h / (heads /
// kv_heads)): softmax(q kᵀ · scale + mask) v as [B, L, heads · D], as `plan` cuts it.
torch::Tensor ChunkAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const ChunkPlan& plan, double scale);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_CHUNK_ATTENTION_H_
