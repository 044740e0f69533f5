// From logits to the per-token quantities the losses take: log π_θ(target) and the entropy of
// π_θ(·|s), both under the sampling temperature. The actor's sampler records log μ of the
// distribution it actually sampled from (after temperature), so the learner must evaluate
// log π_θ under the same temperature for the ratio π/μ to be 1 on-policy.
#ifndef FLYWHEEL_LEARNER_TOKEN_LOGPROBS_H_
#define FLYWHEEL_LEARNER_TOKEN_LOGPROBS_H_

#include <torch/torch.h>

namespace flywheel {

// logits [..., V], targets [...] (int64) → log softmax(logits / T)[target], shape [...].
torch::Tensor TokenLogprobs(const torch::Tensor& logits, const torch::Tensor& targets,
                            double temperature = 1.0);

// logits [..., V] → H = −Σ_v p_v log p_v of softmax(logits / T), shape [...].
torch::Tensor TokenEntropy(const torch::Tensor& logits, double temperature = 1.0);

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_TOKEN_LOGPROBS_H_
