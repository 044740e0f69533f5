#include "flywheel/model/chunk_attention.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

namespace flywheel {
namespace {

using Chunk = ChunkCut::Chunk;

// Row b's document starts: doc_start[t] = the first token of the document holding token t.
std::vector<int64_t> DocumentStarts(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> starts;
  int64_t start = 0;
  for (int64_t n : lengths) {
    starts.insert(starts.end(), n, start);
    start += n;
  }
  return starts;
}

// into[j] |= row[j] for j < n, eight bytes at a time.
void OrInto(uint8_t* into, const bool* row, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    uint64_t a, r;
    std::memcpy(&a, into + j, 8);
    std::memcpy(&r, row + j, 8);
    a |= r;
    std::memcpy(into + j, &a, 8);
  }
  for (; j < n; ++j) into[j] |= static_cast<uint8_t>(row[j]);
}

// Fills cut.doc_starts and cut.chunks.
void CutRows(const std::vector<std::vector<int64_t>>& lengths, const torch::Tensor& mask,
             ChunkCut& cut) {
  const int64_t length = cut.length, chunk = cut.chunk;
  const bool* allowed = mask.defined() ? mask.data_ptr<bool>() : nullptr;
  std::vector<uint8_t> read;
  for (int64_t b = 0; b < static_cast<int64_t>(lengths.size()); ++b) {
    const std::vector<int64_t>& doc_start = cut.doc_starts.emplace_back(DocumentStarts(lengths[b]));
    const int64_t used = static_cast<int64_t>(doc_start.size());
    for (int64_t first = 0; first < used; first += chunk) {
      Chunk c{b, first, std::min(chunk, used - first), {}};
      const int64_t low = doc_start[first], end = first + c.size;
      if (allowed == nullptr) {  // causal: every key from the first document's start on
        c.keys.resize(end - low);
        std::iota(c.keys.begin(), c.keys.end(), low);
      } else {  // a tree segment: the union of what the chunk's tokens may read
        read.assign(end - low, 0);
        for (int64_t t = first; t < end; ++t) {
          OrInto(read.data(), allowed + (b * length + t) * length + low, end - low);
        }
        for (int64_t j = 0; j < end - low; ++j) {
          if (read[j]) c.keys.push_back(low + j);
        }
      }
      cut.chunks.push_back(std::move(c));
    }
  }
}

// ChunkCut::batches.
std::vector<std::vector<size_t>> Batches(const std::vector<Chunk>& chunks) {
  std::vector<size_t> order(chunks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return chunks[a].keys.size() > chunks[b].keys.size();
  });
  std::vector<std::vector<size_t>> batches;
  size_t batch_keys = 0;
  for (size_t i : order) {
    if (batches.empty() || 3 * chunks[i].keys.size() < 2 * batch_keys) {
      batches.emplace_back();
      batch_keys = chunks[i].keys.size();
    }
    batches.back().push_back(i);
  }
  return batches;
}

double PaddedEntries(const std::vector<Chunk>& chunks,
                     const std::vector<std::vector<size_t>>& batches, int64_t chunk) {
  double entries = 0;
  for (const auto& batch : batches) {
    entries += static_cast<double>(batch.size() * chunk * chunks[batch.front()].keys.size());
  }
  return entries;
}

void CheckMask(const torch::Tensor& mask, int64_t rows, int64_t length) {
  TORCH_CHECK_VALUE(
      !mask.defined() || (mask.device().is_cpu() && mask.is_contiguous() &&
                          mask.scalar_type() == torch::kBool && mask.dim() == 3 &&
                          mask.size(0) == rows && mask.size(1) == length && mask.size(2) == length),
      "chunk attention: the mask must be a contiguous CPU bool [B, L, L]");
}

}  // namespace

ChunkCut CutChunks(const std::vector<std::vector<int64_t>>& lengths, const torch::Tensor& mask,
                   int64_t length, int64_t chunk) {
  TORCH_CHECK_VALUE(chunk > 0, "chunk attention: chunk ", chunk, " must be > 0");
  CheckMask(mask, static_cast<int64_t>(lengths.size()), length);
  for (const auto& row : lengths) {
    TORCH_CHECK_VALUE(std::accumulate(row.begin(), row.end(), int64_t{0}) <= length,
                      "chunk attention: a row's documents overflow its length ", length);
  }
  ChunkCut cut;
  cut.chunk = chunk;
  cut.length = length;
  CutRows(lengths, mask, cut);
  cut.batches = Batches(cut.chunks);
  cut.entries = PaddedEntries(cut.chunks, cut.batches, chunk);
  return cut;
}

ChunkPlan PlanChunks(const ChunkCut& cut, const torch::Tensor& mask) {
  const std::vector<Chunk>& chunks = cut.chunks;
  const auto& batches = cut.batches;
  const int64_t chunk = cut.chunk, length = cut.length;
  const int64_t rows = static_cast<int64_t>(cut.doc_starts.size());
  CheckMask(mask, rows, length);
  const bool* allowed = mask.defined() ? mask.data_ptr<bool>() : nullptr;

  ChunkPlan plan;
  plan.chunk = chunk;
  plan.entries = cut.entries;
  // Padding (and anything no chunk covers) outputs its own value: the slots after the batches'.
  int64_t slots = 0;
  for (const auto& batch : batches) slots += static_cast<int64_t>(batch.size()) * chunk;
  torch::Tensor source = torch::arange(slots, slots + rows * length, torch::kLong);
  int64_t* source_of = source.data_ptr<int64_t>();
  int64_t slot = 0;
  for (const auto& batch : batches) {
    ChunkBatch out;
    out.chunks = static_cast<int64_t>(batch.size());
    out.keys = static_cast<int64_t>(chunks[batch.front()].keys.size());
    out.queries = torch::zeros({out.chunks * chunk}, torch::kLong);
    out.key_index = torch::zeros({out.chunks * out.keys}, torch::kLong);
    torch::Tensor readable = torch::zeros({out.chunks, chunk, out.keys}, torch::kBool);
    int64_t* queries = out.queries.data_ptr<int64_t>();
    int64_t* key_index = out.key_index.data_ptr<int64_t>();
    bool* may_read = readable.data_ptr<bool>();
    for (int64_t n = 0; n < out.chunks; ++n) {
      const Chunk& c = chunks[batch[n]];
      const int64_t base = c.row * length;
      const int64_t read = static_cast<int64_t>(c.keys.size());
      for (int64_t j = 0; j < read; ++j) key_index[n * out.keys + j] = base + c.keys[j];
      for (int64_t i = 0; i < chunk; ++i) {
        bool* into = may_read + (n * chunk + i) * out.keys;
        if (i >= c.size) {  // an empty slot: key slot 0, so that its softmax is defined
          into[0] = true;
          continue;
        }
        const int64_t t = c.first + i;
        queries[n * chunk + i] = base + t;
        source_of[base + t] = slot + n * chunk + i;
        if (allowed != nullptr) {
          const bool* row = allowed + (base + t) * length;
          for (int64_t j = 0; j < read; ++j) into[j] = row[c.keys[j]];
        } else {
          const int64_t low = cut.doc_starts[c.row][t];
          for (int64_t j = 0; j < read; ++j) into[j] = c.keys[j] >= low && c.keys[j] <= t;
        }
      }
    }
    out.additive =
        torch::zeros({out.chunks, 1, 1, chunk, out.keys})
            .masked_fill(readable.logical_not().view({out.chunks, 1, 1, chunk, out.keys}),
                         -std::numeric_limits<float>::infinity());
    slot += out.chunks * chunk;
    plan.batches.push_back(std::move(out));
  }
  plan.source = std::move(source);
  return plan;
}

ChunkPlan PlanChunks(const std::vector<std::vector<int64_t>>& lengths, const torch::Tensor& mask,
                     int64_t length, int64_t chunk) {
  return PlanChunks(CutChunks(lengths, mask, length, chunk), mask);
}

torch::Tensor ChunkAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const ChunkPlan& plan, double scale) {
  const int64_t rows = q.size(0), length = q.size(1), heads = q.size(2), dim = q.size(3);
  const int64_t kv_heads = k.size(2), groups = heads / kv_heads, chunk = plan.chunk;
  TORCH_CHECK_VALUE(plan.source.numel() == rows * length, "chunk attention: a plan for ",
                    plan.source.numel(), " tokens, q has ", rows * length);
  const torch::Tensor qf = q.reshape({rows * length, heads, dim}) * scale;
  const torch::Tensor kf = k.reshape({rows * length, kv_heads, dim});
  const torch::Tensor vf = v.reshape({rows * length, kv_heads, dim});
  // A kv head's query heads are folded into its query rows ([chunks, kv_heads, groups · C, D]), so
  // that keys and values are gathered once per kv head, not repeated for each query head.
  const auto device = q.device();
  std::vector<torch::Tensor> outputs;
  for (const ChunkBatch& batch : plan.batches) {
    const int64_t chunks = batch.chunks, keys = batch.keys;
    const torch::Tensor queries = qf.index_select(0, batch.queries.to(device))
                                      .view({chunks, chunk, kv_heads, groups, dim})
                                      .permute({0, 2, 3, 1, 4})
                                      .reshape({chunks, kv_heads, groups * chunk, dim});
    const torch::Tensor key_index = batch.key_index.to(device);
    const torch::Tensor key_rows =  // [chunks, kv_heads, D, K]
        kf.index_select(0, key_index).view({chunks, keys, kv_heads, dim}).permute({0, 2, 3, 1});
    const torch::Tensor value_rows =  // [chunks, kv_heads, K, D]
        vf.index_select(0, key_index).view({chunks, keys, kv_heads, dim}).transpose(1, 2);
    const torch::Tensor scores =
        (torch::matmul(queries, key_rows).view({chunks, kv_heads, groups, chunk, keys}) +
         batch.additive.to(device, q.scalar_type()))
            .view({chunks, kv_heads, groups * chunk, keys});
    outputs.push_back(torch::matmul(torch::softmax(scores, -1), value_rows)
                          .view({chunks, kv_heads, groups, chunk, dim})
                          .permute({0, 3, 1, 2, 4})
                          .reshape({chunks * chunk, heads * dim}));
  }
  // Every token's own value (for query heads as repeat_kv gives them): what padding outputs.
  outputs.push_back(vf.unsqueeze(2)
                        .expand({rows * length, kv_heads, groups, dim})
                        .reshape({rows * length, heads * dim}));
  return torch::cat(outputs, 0)
      .index_select(0, plan.source.to(device))
      .view({rows, length, heads * dim});
}

}  // namespace flywheel
