#include "flywheel/model/sampling.h"

#include <cmath>
#include <limits>

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
  double total = 0;
  for (int64_t i = 0; i < vocab_size; ++i) total += probs[i];
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng) * total;
  double cumulative = 0;
  int64_t last_possible = -1;
  for (int64_t i = 0; i < vocab_size; ++i) {
    if (!(probs[i] > 0)) continue;  // outside the truncation set: never drawn
    last_possible = i;
    cumulative += probs[i];
    if (u < cumulative) return i;
  }
  return last_possible;
}

}  // namespace flywheel
