#include "flywheel/actor/decode_graphs.h"

#if FLYWHEEL_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#endif

#include <spdlog/spdlog.h>
#include <torch/version.h>

#include <algorithm>

namespace flywheel {

int64_t DecodeBatchBucket(int64_t rows) {
  if (rows <= 8) {
    int64_t bucket = 1;
    while (bucket < rows) bucket *= 2;
    return bucket;
  }
  return (rows + 15) / 16 * 16;
}

int64_t DecodeAttendBucket(int64_t keys) {
  constexpr int64_t kLinearFrom = 2048;
  if (keys > kLinearFrom) return (keys + kLinearFrom - 1) / kLinearFrom * kLinearFrom;
  int64_t bucket = 128;
  while (bucket < keys) bucket *= 2;
  return bucket;
}

struct DecodeGraphs::Graph {
  torch::Tensor inputs;  // [3, B] int64 on the device: tokens, positions, write slots
  torch::Tensor logits;  // [B, V], written by every replay
  int64_t last_use = 0;
#if FLYWHEEL_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
};

namespace {

// The fixed-shape decode step over `inputs` [3, B] (tokens, positions, write slots): what a
// graph records, and what runs eagerly where there is none.
torch::Tensor FixedShapeStep(const Transformer& model, KvCache& cache, const torch::Tensor& inputs,
                             bool identity, int64_t attend) {
  const int64_t rows = inputs.size(1);
  const torch::Tensor tokens = inputs[0].view({rows, 1});
  const torch::Tensor positions = inputs[1].view({rows, 1});
  const torch::Tensor allowed =
      torch::arange(attend, inputs.options()).view({1, 1, attend}) <= positions.unsqueeze(2);
  auto binding = cache.BindDevice(inputs[2], inputs[1], identity, attend);
  return model->Logits(model->Hidden(tokens, positions, allowed, &binding).select(1, 0));
}

}  // namespace

DecodeGraphs::DecodeGraphs(int64_t max_graphs) : max_graphs_(std::max<int64_t>(max_graphs, 1)) {}

DecodeGraphs::~DecodeGraphs() { Clear(); }

void DecodeGraphs::Clear() {
#if FLYWHEEL_CUDA
  // A graph may still be replaying on the device.
  if (!graphs_.empty() && cache_ != nullptr && cache_->device().is_cuda()) {
    torch::cuda::synchronize(cache_->device().index());
  }
#endif
  graphs_.clear();
}

torch::Tensor DecodeGraphs::Forward(const Transformer& model, KvCache& cache,
                                    std::span<const int64_t> tokens,
                                    std::span<const int64_t> positions,
                                    std::span<const int64_t> slots, int64_t scratch_slot) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  TORCH_CHECK(n > 0 && positions.size() == tokens.size() && slots.size() == tokens.size(),
              "DecodeGraphs: one token, position and slot a row");
  bool identity = true;
  int64_t attend = 0;
  for (int64_t b = 0; b < n; ++b) {
    identity = identity && slots[b] == b;
    attend = std::max(attend, positions[b] + 1);
  }
  const int64_t batch = DecodeBatchBucket(n);
  const int64_t attend_bucket = DecodeAttendBucket(attend);
  // Identity rows read slots 0..B-1, padding rows included; everything writes below
  // num_slots() and attend_bucket.
  cache.Reserve(std::max(identity ? batch : 0, scratch_slot + 1), attend_bucket);
  if (&cache != cache_ || cache.generation() != cache_generation_) {
    Clear();
    cache_ = &cache;
    cache_generation_ = cache.generation();
  }

  torch::Tensor staging = torch::zeros({3, batch}, torch::kInt64);
  int64_t* rows = staging.data_ptr<int64_t>();
  std::copy(tokens.begin(), tokens.end(), rows);
  std::copy(positions.begin(), positions.end(), rows + batch);
  std::copy(slots.begin(), slots.end(), rows + 2 * batch);
  std::fill(rows + 2 * batch + n, rows + 3 * batch, scratch_slot);

  const Key key{batch, attend_bucket, identity};
  std::unique_ptr<Graph>& graph = graphs_[key];
  if (graph == nullptr) {
    graph = std::make_unique<Graph>();
    graph->inputs =
        torch::zeros({3, batch}, torch::TensorOptions(torch::kInt64).device(cache.device()));
  }
  graph->last_use = ++uses_;
  graph->inputs.copy_(staging);

#if FLYWHEEL_CUDA
  if (cache.device().is_cuda() && !capture_failed_) {
    if (graph->graph == nullptr) Capture(*graph, model, cache, identity, attend_bucket);
    if (graph->graph != nullptr) {
      graph->graph->replay();
      DropLeastRecentlyUsed(key);
      return graph->logits.narrow(0, 0, n);
    }
  }
#endif
  graph->logits = FixedShapeStep(model, cache, graph->inputs, identity, attend_bucket);
  DropLeastRecentlyUsed(key);
  return graph->logits.narrow(0, 0, n);
}

void DecodeGraphs::DropLeastRecentlyUsed(const Key& keep) {
  while (static_cast<int64_t>(graphs_.size()) > max_graphs_) {
    auto oldest = graphs_.end();
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
      if (it->first == keep) continue;
      if (oldest == graphs_.end() || it->second->last_use < oldest->second->last_use) oldest = it;
    }
#if FLYWHEEL_CUDA
    if (cache_ != nullptr && cache_->device().is_cuda()) {
      torch::cuda::synchronize(cache_->device().index());
    }
#endif
    graphs_.erase(oldest);
  }
}

void DecodeGraphs::Capture(Graph& graph, const Transformer& model, KvCache& cache, bool identity,
                           int64_t attend) {
#if FLYWHEEL_CUDA
  const c10::DeviceIndex device = cache.device().index();
  if (pool_ == decltype(pool_){0, 0}) pool_ = at::cuda::graph_pool_handle();
  // Captures run on a side stream (the legacy default stream cannot be captured); the eager run
  // before the capture writes the same keys the replay writes again.
  torch::cuda::synchronize(device);
  const c10::cuda::CUDAStream stream =
      c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device);
  {
    const c10::cuda::CUDAStreamGuard guard(stream);
    FixedShapeStep(model, cache, graph.inputs, identity, attend);
    stream.synchronize();
    graph.graph = std::make_unique<at::cuda::CUDAGraph>();
    try {
#if TORCH_VERSION_MAJOR >= 2
      // Thread-local: the learner may allocate on its own thread of the same process meanwhile.
      graph.graph->capture_begin(pool_, cudaStreamCaptureModeThreadLocal);
#else
      graph.graph->capture_begin(pool_);
#endif
      graph.logits = FixedShapeStep(model, cache, graph.inputs, identity, attend);
      graph.graph->capture_end();
    } catch (const std::exception& e) {
      // An operation that cannot be captured: decode without graphs from now on, rather than
      // fail every step. (capture_end after a failed capture throws too; it ends the capture.)
      try {
        graph.graph->capture_end();
      } catch (const std::exception&) {
      }
      graph.graph.reset();
      capture_failed_ = true;
      spdlog::warn("rollout engine: decoding without CUDA graphs, the capture failed: {}",
                   e.what());
    }
  }
  torch::cuda::synchronize(device);
  if (graph.graph != nullptr) ++captures_;
#else
  (void)graph, (void)model, (void)cache, (void)identity, (void)attend;
#endif
}

}  // namespace flywheel
