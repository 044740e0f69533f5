// Decode steps replayed as CUDA graphs.
//
// A decode step of the LibTorch backend is a few thousand small kernels (a Qwen3-0.6B shape has
// 28 layers of about 60 operations each), every one launched from the host: on a GPU the step
// lasts as long as launching them (53 ms at batch 256 on an H200, docs/gpu.md), not as long as
// its arithmetic. A CUDA graph records the launches once and replays them with one call. A graph
// replays fixed shapes at fixed addresses, so the step is given fixed shapes:
//
//   rows    [ r0 r1 r2 ... r(n-1) | pad ... pad ]     batch bucket  B = DecodeBatchBucket(n)
//   keys    [ 0 .............. attend | masked  ]     attend bucket A = DecodeAttendBucket(attend)
//
//   - A padding row writes its key at position 0 of a scratch slot (one no sequence owns) and
//     sees that key alone; its logits are not returned. Masked keys weigh exactly 0.
//   - The step's tokens, positions and slots are copied into one input tensor the graph reads
//     ([3, B] int64), and the graph writes its logits into the same output tensor every replay.
//   - Each (B, A, identity) has its own graph, captured at its first use (after one eager run,
//     so that lazy initialisation such as cuBLAS's workspace happens outside the capture) and
//     kept while the weights and the cache's tensors stay the same: Clear at a weight swap, and a
//     cache growth is seen through KvCache::generation. At most `max_graphs` are kept, the least
//     recently used dropped first; they share one memory pool, which is safe because they are
//     replayed one at a time and each output is read before the next replay. A capture that
//     fails (an operation that cannot be captured) is logged, and the engine decodes eagerly.
//
// Without CUDA, or for a model on the CPU, the same fixed-shape step runs eagerly, without a
// graph: that is how the tests check on a CPU that it decodes as the unpadded step does.
// Not thread-safe: one owner (a rollout engine).
#ifndef FLYWHEEL_ACTOR_DECODE_GRAPHS_H_
#define FLYWHEEL_ACTOR_DECODE_GRAPHS_H_

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <utility>

#include "flywheel/model/kv_cache.h"
#include "flywheel/model/transformer.h"

namespace flywheel {

// Rows padded to 1, 2, 4, 8, then the next multiple of 16 (at most 15 wasted rows past 8).
int64_t DecodeBatchBucket(int64_t rows);
// Keys read padded to the next power of two from 128 to 2048, then the next multiple of 2048.
int64_t DecodeAttendBucket(int64_t keys);

class DecodeGraphs {
 public:
  explicit DecodeGraphs(int64_t max_graphs = 8);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // Logits [n, V] of one token per row: row b's token tokens[b] at position positions[b] of
  // cache slot slots[b], attending to that slot's positions [0, positions[b]]. `scratch_slot` is
  // a slot no sequence owns. Grows the cache as the buckets need (more slots, more positions).
  // The result is valid until the next call.
  torch::Tensor Forward(const Transformer& model, KvCache& cache, std::span<const int64_t> tokens,
                        std::span<const int64_t> positions, std::span<const int64_t> slots,
                        int64_t scratch_slot);

  // Drops every graph (the weights they read are no longer the engine's).
  void Clear();
  int64_t num_graphs() const { return static_cast<int64_t>(graphs_.size()); }
  // Graphs captured so far, over the owner's life (0 without CUDA).
  int64_t captures() const { return captures_; }

 private:
  struct Graph;
  using Key = std::tuple<int64_t, int64_t, bool>;  // batch bucket, attend bucket, identity

  void Capture(Graph& graph, const Transformer& model, KvCache& cache, bool identity,
               int64_t attend);
  void DropLeastRecentlyUsed(const Key& keep);

  const int64_t max_graphs_;
  std::map<Key, std::unique_ptr<Graph>> graphs_;
  int64_t cache_generation_ = -1;
  const KvCache* cache_ = nullptr;
  int64_t uses_ = 0;
  int64_t captures_ = 0;
  bool capture_failed_ = false;  // then every step runs eagerly
  // The graphs' shared memory pool (at::cuda::MempoolId_t); {0, 0} until the first capture.
  std::pair<unsigned long long, unsigned long long> pool_{0, 0};
};

}  // namespace flywheel

#endif  // FLYWHEEL_ACTOR_DECODE_GRAPHS_H_
