#include "flywheel/model/document_attention.h"

#include <torch/version.h>

#include <algorithm>
#include <limits>

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

}  // namespace

torch::Tensor DocumentAttention(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, const Documents& documents, double scale) {
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
  const int64_t groups = heads / kv_heads;
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

  // The CPU path (and LibTorch 1.13's) is the one CI tests; the GPU build fuses on CUDA only.
  bool fused = false;
#ifdef FLYWHEEL_FUSED_ATTENTION
  fused = q.is_cuda();
#endif
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

}  // namespace flywheel
