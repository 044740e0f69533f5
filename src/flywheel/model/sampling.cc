#include "flywheel/model/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "flywheel/model/simd_kernels.h"

namespace flywheel {

torch::Tensor SamplingLogProbs(const torch::Tensor& logits, const SamplingParams& params) {
  const double inf = std::numeric_limits<double>::infinity();
  auto z = logits.to(torch::kFloat32) / params.temperature;
  const int64_t vocab = z.size(-1);
  if (params.top_k > 0 && params.top_k < vocab) {
    const auto kth = std::get<0>(z.topk(params.top_k, -1)).narrow(-1, params.top_k - 1, 1);
    z = z.masked_fill(z < kth, -inf);
  }
  if (params.top_p < 1.0) {
    const auto [sorted, order] = z.sort(-1, /*descending=*/true);
    const auto probs = torch::softmax(sorted, -1);
    const auto mass_before = probs.cumsum(-1) - probs;
    // Sorted position r is dropped iff the mass before it already reaches top_p; position 0 has
    // mass 0 < top_p and always stays.
    const auto drop_sorted = mass_before >= params.top_p;
    const auto drop = torch::zeros_like(drop_sorted).scatter(-1, order, drop_sorted);
    z = z.masked_fill(drop, -inf);
  }
  return torch::log_softmax(z, -1);
}

torch::Tensor TokenLogprobs(const torch::Tensor& logits, const torch::Tensor& targets,
                            const SamplingParams& params) {
  TORCH_CHECK_VALUE(logits.dim() == targets.dim() + 1 &&
                        logits.sizes().slice(0, targets.dim()) == targets.sizes(),
                    "TokenLogprobs: logits ", logits.sizes(), " do not match targets ",
                    targets.sizes(), " (expected logits [..., V] and targets [...])");
  const auto logprobs = SamplingLogProbs(logits, params);
  return logprobs.gather(-1, targets.to(torch::kInt64).unsqueeze(-1)).squeeze(-1);
}

int64_t DrawToken(const float* probs, int64_t vocab_size, std::mt19937_64& rng) {
  // Accumulating in double and scaling the uniform by the row's own total makes the draw
  // independent of float rounding in the row's sum.
  // Four partial sums: independent add chains (a serial double sum is a latency chain as long
  // as the vocabulary).
  double partial[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= vocab_size; i += 4) {
    for (int l = 0; l < 4; ++l) partial[l] += probs[i + l];
  }
  for (; i < vocab_size; ++i) partial[0] += probs[i];
  const double total = (partial[0] + partial[1]) + (partial[2] + partial[3]);
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng) * total;
  double cumulative = 0;
  int64_t last_possible = -1;
  for (i = 0; i < vocab_size; ++i) {
    if (!(probs[i] > 0)) continue;  // outside the truncation set: never drawn
    last_possible = i;
    cumulative += probs[i];
    if (u < cumulative) return i;
  }
  return last_possible;
}

namespace {

// z = logits / temperature, as the LibTorch version divides a float32 tensor by the scalar.
void Scale(const float* logits, int64_t n, float temperature, float* z) {  // may alias
  if (temperature == 1.0f) {
    if (z != logits) std::memcpy(z, logits, n * sizeof(float));
    return;
  }
  simd::Divide(logits, temperature, z, n);
}

// In place: z → log_softmax(z) (x − max − log Σ exp(x − max)); `scratch` holds n floats.
void LogSoftmaxInPlace(float* z, int64_t n, float* scratch) {
  const float m = simd::Max(z, n);
  const float shift = m + std::log(simd::ExpShifted(z, m, scratch, n));
  for (int64_t i = 0; i < n; ++i) z[i] -= shift;
}

}  // namespace

void SamplingLogProbsRow(const float* logits, int64_t vocab, const SamplingParams& params,
                         float* z) {
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  thread_local std::vector<float> scratch;
  thread_local std::vector<int32_t> order;
  if (static_cast<int64_t>(scratch.size()) < vocab) scratch.resize(vocab);
  Scale(logits, vocab, static_cast<float>(params.temperature), z);
  if (params.top_k > 0 && params.top_k < vocab) {
    // Keep z >= the k-th largest (ties at the k-th kept), as masked_fill(z < kth).
    std::copy(z, z + vocab, scratch.begin());
    std::nth_element(scratch.begin(), scratch.begin() + (params.top_k - 1),
                     scratch.begin() + vocab, std::greater<float>());
    const float kth = scratch[params.top_k - 1];
    for (int64_t i = 0; i < vocab; ++i) z[i] = z[i] < kth ? kMinusInf : z[i];
  }
  if (params.top_p < 1.0) {
    order.resize(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return z[a] > z[b]; });
    // softmax of the sorted logits, then the mass strictly before each sorted position (cumsum
    // accumulated in double and stored as float, minus the position's own probability).
    const float m = z[order[0]];
    double total = 0;
    for (int64_t r = 0; r < vocab; ++r) {
      scratch[r] = simd::Exp(z[order[r]] - m);
      total += scratch[r];
    }
    const float sum = static_cast<float>(total);
    const float top_p = static_cast<float>(params.top_p);
    double cumulative = 0;
    for (int64_t r = 0; r < vocab; ++r) {
      const float p = scratch[r] / sum;
      cumulative += p;
      const float before = static_cast<float>(cumulative) - p;
      if (before >= top_p) z[order[r]] = kMinusInf;
    }
  }
  LogSoftmaxInPlace(z, vocab, scratch.data());
}

int64_t SampleRow(const float* logits, int64_t vocab, const SamplingParams& params,
                  std::mt19937_64& rng, float* logprobs, float* probs) {
  SamplingLogProbsRow(logits, vocab, params, logprobs);
  simd::ExpShifted(logprobs, 0.0f, probs, vocab);
  return DrawToken(probs, vocab, rng);
}

SampledRows SampleRows(const torch::Tensor& logits, const std::vector<const SamplingParams*>& params,
                       const std::vector<std::mt19937_64*>& rngs) {
  const int64_t rows = logits.size(0);
  TORCH_CHECK_VALUE(logits.dim() == 2 && static_cast<int64_t>(params.size()) == rows &&
                        static_cast<int64_t>(rngs.size()) == rows,
                    "SampleRows: logits ", logits.sizes(), " for ", params.size(), " params and ",
                    rngs.size(), " generators");
  // The uniforms first, in row order, as the per-row path draws them.
  std::vector<double> uniforms(rows);
  for (int64_t b = 0; b < rows; ++b) {
    uniforms[b] = std::uniform_real_distribution<double>(0.0, 1.0)(*rngs[b]);
  }
  // Rows that share their sampling parameters (usually all of them) are computed together.
  torch::Tensor logprobs = torch::empty(logits.sizes(), logits.options().dtype(torch::kFloat32));
  std::vector<bool> done(rows, false);
  for (int64_t b = 0; b < rows; ++b) {
    if (done[b]) continue;
    const SamplingParams& p = *params[b];
    std::vector<int64_t> same;
    for (int64_t r = b; r < rows; ++r) {
      const SamplingParams& q = *params[r];
      if (!done[r] && q.temperature == p.temperature && q.top_k == p.top_k && q.top_p == p.top_p) {
        same.push_back(r);
        done[r] = true;
      }
    }
    const torch::Tensor index = torch::tensor(same, torch::kInt64).to(logits.device());
    logprobs.index_copy_(0, index, SamplingLogProbs(logits.index_select(0, index), p));
  }
  // Inverse CDF as DrawToken: the first token whose cumulative mass (in double, scaled by the
  // row's own total) exceeds u; a token of probability 0 adds nothing and is never first.
  const torch::Tensor probs = logprobs.exp().to(torch::kFloat64);
  const torch::Tensor cumulative = probs.cumsum(-1);
  const torch::Tensor u =
      torch::tensor(uniforms, torch::kFloat64).to(logits.device()) * cumulative.select(-1, -1);
  torch::Tensor token =
      torch::searchsorted(cumulative, u.unsqueeze(-1), /*out_int32=*/false, /*right=*/true)
          .squeeze(-1);
  // u at the very top (rounding): the last token that can be drawn.
  const torch::Tensor positions = torch::arange(probs.size(-1), token.options());
  const torch::Tensor last = std::get<0>(torch::where(probs > 0, positions, -1).max(-1));
  token = torch::minimum(token, last);
  const torch::Tensor chosen = logprobs.gather(-1, token.unsqueeze(-1)).squeeze(-1);
  const torch::Tensor token_host = token.to(torch::kCPU).contiguous();
  const torch::Tensor logprob_host = chosen.to(torch::kCPU).contiguous();
  SampledRows out;
  out.tokens.assign(token_host.data_ptr<int64_t>(), token_host.data_ptr<int64_t>() + rows);
  out.logprobs.assign(logprob_host.data_ptr<float>(), logprob_host.data_ptr<float>() + rows);
  return out;
}

}  // namespace flywheel
