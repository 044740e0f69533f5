#include "flywheel/model/document_attention.h"

#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
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
  // Token-major flat views: token t of row b is index b·L + t.
  const torch::Tensor qf = q.reshape({rows * length, heads, dim});
  const torch::Tensor kf = k.reshape({rows * length, kv_heads, dim});
  const torch::Tensor vf = v.reshape({rows * length, kv_heads, dim});
  // One additive causal mask for the longest document; each document uses its top-left corner.
  // With a mask, each document's additive block is made from it instead.
  const float kMasked = -std::numeric_limits<float>::infinity();
  const torch::Tensor causal = mask.defined()
                                   ? torch::Tensor()
                                   : torch::full({longest, longest}, kMasked, q.options()).triu(1);
  const torch::Tensor allowed = mask.defined() ? mask.to(q.device()) : torch::Tensor();

  std::vector<torch::Tensor> pieces;
  for (int64_t b = 0; b < rows; ++b) {
    int64_t offset = b * length;
    for (int64_t n : doc_lengths[b]) {
      // [n, n] bool: query i of the document may attend to key j.
      const torch::Tensor block =
          allowed.defined()
              ? allowed[b].narrow(0, offset - b * length, n).narrow(1, offset - b * length, n)
              : torch::Tensor();
      const torch::Tensor qd = qf.narrow(0, offset, n).transpose(0, 1);  // [H, n, D]
      const torch::Tensor vd = RepeatKv(vf.narrow(0, offset, n).transpose(0, 1), groups);
      torch::Tensor out;  // [H, n, D]
      if (fused) {
#ifdef FLYWHEEL_FUSED_ATTENTION
        const torch::Tensor kd = RepeatKv(kf.narrow(0, offset, n).transpose(0, 1), groups);
        out =
            at::scaled_dot_product_attention(
                qd.unsqueeze(0), kd.unsqueeze(0), vd.unsqueeze(0),
                /*attn_mask=*/block.defined() ? c10::optional<torch::Tensor>(block) : c10::nullopt,
                /*dropout_p=*/0.0,
                /*is_causal=*/!block.defined(), scale)
                .squeeze(0);
#endif
      } else {
        const torch::Tensor kd = RepeatKv(kf.narrow(0, offset, n).permute({1, 2, 0}), groups);
        // scores = mask + scale · q kᵀ in one GEMM pass: [H, n, n].
        const torch::Tensor additive =
            block.defined()
                ? torch::zeros({n, n}, q.options()).masked_fill(block.logical_not(), kMasked)
                : causal.narrow(0, 0, n).narrow(1, 0, n);
        const torch::Tensor scores = torch::baddbmm(additive, qd, kd, 1.0, scale);
        out = torch::bmm(torch::softmax(scores, -1), vd);
      }
      pieces.push_back(out.transpose(0, 1).reshape({n, heads * dim}));
      offset += n;
    }
    // Padding sees only itself: softmax over one key is 1, the output is its value vector.
    const int64_t pad = (b + 1) * length - offset;
    if (pad > 0) {
      pieces.push_back(vf.narrow(0, offset, pad)
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

// What the two paths cost on this machine for one head shape, measured once as training runs
// them (forward and backward, the fastest of a few runs): seconds per score entry of the dense
// path, and the fixed seconds the per-document path spends on each document (the overhead of
// its operations and their autograd nodes).
struct PathCosts {
  double entry_s = 0;
  double document_s = 0;
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

}  // namespace

bool DenseIsCheaper(const torch::Tensor& q, int64_t kv_heads,
                    const std::vector<std::vector<int64_t>>& doc_lengths) {
  // An accelerator runs asynchronously (host timings would not measure it) and has the fused
  // kernels: its documents stay separate.
  if (!q.device().is_cpu()) return false;
  const int64_t rows = q.size(0), length = q.size(1);
  // The dense scores and their softmax are held for backward: at most 64 MiB of them.
  constexpr int64_t kMaxDenseScores = int64_t{1} << 24;
  if (rows * q.size(2) * length * length > kMaxDenseScores) return false;
  double documents = 0, entries = 0;
  for (const auto& row : doc_lengths) {
    documents += static_cast<double>(row.size());
    for (int64_t n : row) entries += static_cast<double>(n * n);
  }
  const PathCosts c = CostsFor(q, kv_heads);
  const double dense = static_cast<double>(rows * length * length) * c.entry_s;
  return dense < documents * c.document_s + entries * c.entry_s;
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
    path = DenseIsCheaper(q, kv_heads, doc_lengths) ? DocumentPath::kDenseRows
                                                    : DocumentPath::kPerDocument;
  }
  if (path == DocumentPath::kDenseRows) return DenseRowsAttention(q, k, v, documents, scale);
  return PerDocumentAttention(q, k, v, documents, longest, fused, scale);
}

}  // namespace flywheel
