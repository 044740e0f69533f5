#include "flywheel/model/document_attention.h"

#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/model/attention_layout.h"

// LibTorch 2.1+ has scaled_dot_product_attention with an explicit scale: on CUDA it runs the
// flash / memory-efficient kernels, which never materialise a document's [n, n] scores.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define FLYWHEEL_FUSED_ATTENTION 1
#endif

namespace flywheel {
namespace {

// [kv_heads, a, c] → [kv_heads · groups, a, c], kv head j repeated for query heads j·groups + g.
torch::Tensor RepeatKv(const torch::Tensor& x, int64_t groups) {
  if (groups == 1) return x;
  return x.unsqueeze(1)
      .expand({x.size(0), groups, x.size(1), x.size(2)})
      .reshape({x.size(0) * groups, x.size(1), x.size(2)});
}

// Document by document: Σ n² score entries, a few small operations per document.
torch::Tensor PerDocumentAttention(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, const Documents& documents,
                                   int64_t longest, bool fused, double scale) {
  const std::vector<std::vector<int64_t>>& doc_lengths = documents.lengths;
  const torch::Tensor& mask = documents.mask;
  const int64_t rows = q.size(0), length = q.size(1), heads = q.size(2), dim = q.size(3);
  const int64_t kv_heads = k.size(2), groups = heads / kv_heads;
  // Each row's documents, then its padding, as one split of the token-major flat views (token t
  // of row b is index b·L + t): one autograd node, where a slice per document would write a
  // gradient of the whole batch's size each in backward (on the repair tree job's flat paths,
  // about 100 documents a step, 26 µs a token with slices, 19 µs split).
  std::vector<int64_t> sizes;
  for (int64_t b = 0; b < rows; ++b) {
    int64_t used = 0;
    for (int64_t n : doc_lengths[b]) sizes.push_back(n), used += n;
    if (used < length) sizes.push_back(length - used);
  }
  const std::vector<torch::Tensor> qs =
      q.reshape({rows * length, heads, dim}).split_with_sizes(sizes);
  const std::vector<torch::Tensor> ks =
      k.reshape({rows * length, kv_heads, dim}).split_with_sizes(sizes);
  const std::vector<torch::Tensor> vs =
      v.reshape({rows * length, kv_heads, dim}).split_with_sizes(sizes);
  // One additive causal mask for the longest document; each document uses its top-left corner.
  // With a mask, each document's additive block is made from it instead.
  const float kMasked = -std::numeric_limits<float>::infinity();
  const torch::Tensor causal = mask.defined()
                                   ? torch::Tensor()
                                   : torch::full({longest, longest}, kMasked, q.options()).triu(1);
  const torch::Tensor allowed = mask.defined() ? mask.to(q.device()) : torch::Tensor();

  std::vector<torch::Tensor> pieces;
  size_t piece = 0;
  for (int64_t b = 0; b < rows; ++b) {
    int64_t start = 0;
    for (int64_t n : doc_lengths[b]) {
      // [n, n] bool: query i of the document may attend to key j.
      const torch::Tensor block =
          allowed.defined() ? allowed[b].narrow(0, start, n).narrow(1, start, n) : torch::Tensor();
      start += n;
      const torch::Tensor qd = qs[piece].transpose(0, 1);  // [H, n, D]
      const torch::Tensor vd = RepeatKv(vs[piece].transpose(0, 1), groups);
      torch::Tensor out;  // [H, n, D]
      if (fused) {
#ifdef FLYWHEEL_FUSED_ATTENTION
        const torch::Tensor kd = RepeatKv(ks[piece].transpose(0, 1), groups);
        out =
            at::scaled_dot_product_attention(
                qd.unsqueeze(0), kd.unsqueeze(0), vd.unsqueeze(0),
                /*attn_mask=*/block.defined() ? c10::optional<torch::Tensor>(block) : c10::nullopt,
                /*dropout_p=*/0.0,
                /*is_causal=*/!block.defined(), scale)
                .squeeze(0);
#endif
      } else {
        const torch::Tensor kd = RepeatKv(ks[piece].permute({1, 2, 0}), groups);
        // scores = mask + scale · q kᵀ in one GEMM pass: [H, n, n].
        const torch::Tensor additive =
            block.defined()
                ? torch::zeros({n, n}, q.options()).masked_fill(block.logical_not(), kMasked)
                : causal.narrow(0, 0, n).narrow(1, 0, n);
        const torch::Tensor scores = torch::baddbmm(additive, qd, kd, 1.0, scale);
        out = torch::bmm(torch::softmax(scores, -1), vd);
      }
      pieces.push_back(out.transpose(0, 1).reshape({n, heads * dim}));
      ++piece;
    }
    // Padding sees only itself: softmax over one key is 1, the output is its value vector.
    if (start < length) {
      const int64_t pad = length - start;
      pieces.push_back(vs[piece++]
                           .unsqueeze(2)
                           .expand({pad, kv_heads, groups, dim})
                           .reshape({pad, heads * dim}));
    }
  }
  return torch::cat(pieces, 0).view({rows, length, heads * dim});
}

// Every row at once: one dense [L, L] score matrix per head under the rows' `allowed` mask
// (PackedLayout's block-diagonal causal one, or the tree mask), as the transformer's general
// path computes it. rows · L² entries, but a handful of operations in all.
torch::Tensor DenseRowsAttention(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const Documents& documents, double scale) {
  const int64_t rows = q.size(0), length = q.size(1), heads = q.size(2), dim = q.size(3);
  const int64_t kv_heads = k.size(2), groups = heads / kv_heads;
  torch::Tensor allowed = documents.mask.defined()
                              ? documents.mask.to(torch::kBool)
                              : PackedLayout(documents.lengths, length).allowed;
  // A padding token attends to itself (the tree mask leaves its rows empty).
  allowed = allowed.logical_or(torch::eye(length, torch::kBool).unsqueeze(0));
  const torch::Tensor bias =  // [B, 1, L, L]
      torch::zeros({rows, 1, length, length}, q.options().requires_grad(false))
          .masked_fill(allowed.logical_not().unsqueeze(1).to(q.device()),
                       -std::numeric_limits<float>::infinity());
  auto heads_major = [&](const torch::Tensor& x) {  // [B, L, kv, D] → [B, heads, L, D]
    const torch::Tensor t = x.transpose(1, 2);
    if (groups == 1) return t;
    return t.unsqueeze(2)
        .expand({rows, kv_heads, groups, length, dim})
        .reshape({rows, heads, length, dim});
  };
  const torch::Tensor scores =
      torch::matmul(q.transpose(1, 2), heads_major(k).transpose(-2, -1)) * scale + bias;
  return torch::matmul(torch::softmax(scores, -1), heads_major(v))
      .transpose(1, 2)
      .reshape({rows, length, heads * dim});
}

// What the paths cost on this machine for one head shape, measured once as training runs them
// (forward and backward, the fastest of a few runs): seconds per score entry of the dense path,
// and the fixed seconds the per-document path spends on each document and the chunk path on each
// batch of chunks (the overhead of their operations and autograd nodes).
struct PathCosts {
  double entry_s = 0;
  double document_s = 0;
  double chunk_entry_s = 0;  // the chunk path's seconds per score entry (gathers included)
  double chunk_batch_s = 0;  // and its fixed seconds per batch of chunks
};

PathCosts MeasurePathCosts(const torch::Tensor& like, int64_t heads, int64_t kv_heads,
                           int64_t dim) {
  // The first call may come under no_grad or inference mode (an evaluation): measure with
  // gradients all the same, as training runs.
  c10::InferenceMode not_inference(false);
  torch::AutoGradMode gradients(true);
  constexpr int64_t kLength = 128, kDocuments = 16;
  const auto options = like.options().requires_grad(true);
  const torch::Tensor q = torch::randn({1, kLength, heads, dim}, options);
  const torch::Tensor k = torch::randn({1, kLength, kv_heads, dim}, options);
  const torch::Tensor v = torch::randn({1, kLength, kv_heads, dim}, options);
  auto fastest_seconds = [](const std::function<torch::Tensor()>& attend) {
    double best = std::numeric_limits<double>::infinity();
    for (int rep = 0; rep < 5; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      attend().sum().backward();
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return best;
  };
  const Documents one{{{kLength}}, {}};
  const Documents many{{std::vector<int64_t>(kDocuments, kLength / kDocuments)}, {}};
  const double dense = fastest_seconds([&] { return DenseRowsAttention(q, k, v, one, 1.0); });
  const double per_document = fastest_seconds(
      [&] { return PerDocumentAttention(q, k, v, many, kLength / kDocuments, false, 1.0); });
  PathCosts c;
  c.entry_s = dense / static_cast<double>(kLength * kLength);
  const double entries = static_cast<double>(kLength * kLength / kDocuments);  // Σ n² of `many`
  c.document_s = std::max(0.0, per_document - entries * c.entry_s) / kDocuments;
  // The chunk path: seconds = entries · chunk_entry_s + batches · chunk_batch_s, fitted through a
  // 128-token document in chunks of 16 and a 512-token one in chunks of 64 (both 4 batches;
  // 10,496 and 167,936 entries), an entry costing at least the dense path's.
  constexpr int64_t kLong = 4 * kLength;
  const torch::Tensor q2 = torch::randn({1, kLong, heads, dim}, options);
  const torch::Tensor k2 = torch::randn({1, kLong, kv_heads, dim}, options);
  const torch::Tensor v2 = torch::randn({1, kLong, kv_heads, dim}, options);
  const ChunkPlan small = PlanChunks(one.lengths, torch::Tensor(), kLength, kLength / 8);
  const ChunkPlan large = PlanChunks({{kLong}}, torch::Tensor(), kLong, kLong / 8);
  const double t1 = fastest_seconds([&] { return ChunkAttention(q, k, v, small, 1.0); });
  const double t2 = fastest_seconds([&] { return ChunkAttention(q2, k2, v2, large, 1.0); });
  const double e1 = small.entries, b1 = static_cast<double>(small.batches.size());
  const double e2 = large.entries, b2 = static_cast<double>(large.batches.size());
  const double det = e1 * b2 - e2 * b1;
  c.chunk_entry_s = std::max(c.entry_s, (t1 * b2 - t2 * b1) / det);
  c.chunk_batch_s = std::max(0.0, (t2 - e2 * c.chunk_entry_s) / b2);
  return c;
}

// Per (heads, kv_heads, head dim, dtype), for the life of the process.
using PathCostKey = std::tuple<int64_t, int64_t, int64_t, int>;
ABSL_CONST_INIT absl::Mutex path_costs_mu(absl::kConstInit);
std::map<PathCostKey, PathCosts>* path_costs ABSL_GUARDED_BY(path_costs_mu) = nullptr;

PathCosts CostsFor(const torch::Tensor& q, int64_t kv_heads) {
  const PathCostKey key{q.size(2), kv_heads, q.size(3), static_cast<int>(q.scalar_type())};
  absl::MutexLock lock(&path_costs_mu);
  if (path_costs == nullptr) path_costs = new std::map<PathCostKey, PathCosts>();
  auto it = path_costs->find(key);
  if (it == path_costs->end()) {
    it = path_costs->emplace(key, MeasurePathCosts(q, q.size(2), kv_heads, q.size(3))).first;
  }
  return it->second;
}

// The tree mask as the chunk planner reads it.
torch::Tensor CpuMask(const torch::Tensor& mask) {
  return mask.defined() ? mask.to(torch::kCPU, torch::kBool).contiguous() : torch::Tensor();
}

// The per-document path's seconds over whole documents.
double PerDocumentSeconds(const PathCosts& c, const std::vector<std::vector<int64_t>>& lengths) {
  double documents = 0, entries = 0;
  for (const auto& row : lengths) {
    documents += static_cast<double>(row.size());
    for (int64_t n : row) entries += static_cast<double>(n * n);
  }
  return documents * c.document_s + entries * c.entry_s;
}

// The dense rows' seconds; infinite past their cap (the scores and their softmax are held for
// backward: at most 64 MiB of them).
double DenseRowsSeconds(const PathCosts& c, const torch::Tensor& q) {
  constexpr int64_t kMaxDenseScores = int64_t{1} << 24;
  const int64_t rows = q.size(0), length = q.size(1);
  if (rows * q.size(2) * length * length > kMaxDenseScores) {
    return std::numeric_limits<double>::infinity();
  }
  return static_cast<double>(rows * length * length) * c.entry_s;
}

// Chunks of this many query tokens are tried (the path kChunks forces kTestChunk).
constexpr int64_t kChunkSizes[] = {32, 64, 128, 256};
constexpr int64_t kTestChunk = 4;

// The cheapest of dense rows, whole documents and chunks for `documents`, from the measured costs
// of q's head shape: `plan` decided (and its chunks planned, when chunks won).
void Plan(const torch::Tensor& q, int64_t kv_heads, const Documents& documents,
          DocumentsPlan& plan) {
  const PathCosts c = CostsFor(q, kv_heads);
  const double per_document = PerDocumentSeconds(c, documents.lengths);
  const double dense = DenseRowsSeconds(c, q);
  plan.path = dense < per_document ? DocumentPath::kDenseRows : DocumentPath::kPerDocument;
  plan.decided = true;
  // Chunks for tree segments only: on causal documents they measured no faster (the repair tree
  // job's flat paths: 19.1 µs a token, 18.9 whole) and slower on guess's rows of short episodes
  // (a learner step 0.049 s, 0.039 s dense), costs the estimate below does not see.
  if (!documents.mask.defined()) return;
  const torch::Tensor mask = CpuMask(documents.mask);
  double best_s = std::min(dense, per_document);
  std::optional<ChunkCut> best_cut;
  for (int64_t chunk : kChunkSizes) {
    ChunkCut cut = CutChunks(documents.lengths, mask, q.size(1), chunk);
    const double s =
        cut.entries * c.chunk_entry_s + static_cast<double>(cut.batches.size()) * c.chunk_batch_s;
    if (s < best_s) best_s = s, best_cut = std::move(cut);
  }
  if (best_cut.has_value()) {
    plan.path = DocumentPath::kChunks;
    plan.chunks = PlanChunks(*best_cut, mask);
  }
}

}  // namespace

bool DenseIsCheaper(const torch::Tensor& q, int64_t kv_heads,
                    const std::vector<std::vector<int64_t>>& doc_lengths) {
  // An accelerator runs asynchronously (host timings would not measure it) and has the fused
  // kernels: its documents stay separate.
  if (!q.device().is_cpu()) return false;
  const PathCosts c = CostsFor(q, kv_heads);
  return DenseRowsSeconds(c, q) < PerDocumentSeconds(c, doc_lengths);
}

torch::Tensor DocumentAttention(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, const Documents& documents, double scale,
                                DocumentPath path) {
  const std::vector<std::vector<int64_t>>& doc_lengths = documents.lengths;
  const torch::Tensor& mask = documents.mask;
  TORCH_CHECK_VALUE(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes(),
                    "document attention: q ", q.sizes(), " must be [B, L, heads, D] and k ",
                    k.sizes(), ", v ", v.sizes(), " [B, L, kv_heads, D]");
  const int64_t rows = q.size(0), length = q.size(1), heads = q.size(2), dim = q.size(3);
  const int64_t kv_heads = k.size(2);
  TORCH_CHECK_VALUE(k.size(0) == rows && k.size(1) == length && k.size(3) == dim && kv_heads > 0 &&
                        heads % kv_heads == 0,
                    "document attention: k ", k.sizes(), " does not match q ", q.sizes());
  TORCH_CHECK_VALUE(static_cast<int64_t>(doc_lengths.size()) == rows,
                    "document attention: ", doc_lengths.size(), " rows of document lengths for ",
                    rows, " rows");
  TORCH_CHECK_VALUE(!mask.defined() || (mask.dim() == 3 && mask.size(0) == rows &&
                                        mask.size(1) == length && mask.size(2) == length),
                    "document attention: mask ", mask.sizes(), " must be [B, L, L] for q ",
                    q.sizes());
  int64_t longest = 0;
  for (const auto& row : doc_lengths) {
    int64_t total = 0;
    for (int64_t n : row) {
      TORCH_CHECK_VALUE(n > 0, "document attention: document length ", n, " must be > 0");
      total += n;
      longest = std::max(longest, n);
    }
    TORCH_CHECK_VALUE(total <= length, "document attention: documents total ", total,
                      ", more than the row length ", length);
  }
  // The CPU path (and LibTorch 1.13's) is the one CI tests; the GPU build fuses on CUDA only.
  bool fused = false;
#ifdef FLYWHEEL_FUSED_ATTENTION
  fused = q.is_cuda();
#endif
  if (path == DocumentPath::kCheaper) {
    // On an accelerator (asynchronous, fused kernels) whole documents; on the CPU the cheapest.
    path = DocumentPath::kPerDocument;
    if (q.device().is_cpu()) {
      DocumentsPlan& plan = *documents.plan;
      if (!plan.decided) Plan(q, kv_heads, documents, plan);
      if (plan.path == DocumentPath::kChunks) return ChunkAttention(q, k, v, plan.chunks, scale);
      path = plan.path;
    }
  }
  if (path == DocumentPath::kDenseRows) return DenseRowsAttention(q, k, v, documents, scale);
  if (path == DocumentPath::kChunks) {
    return ChunkAttention(q, k, v, PlanChunks(doc_lengths, CpuMask(mask), length, kTestChunk),
                          scale);
  }
  return PerDocumentAttention(q, k, v, documents, longest, fused, scale);
}

}  // namespace flywheel
