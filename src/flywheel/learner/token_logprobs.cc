#include "flywheel/learner/token_logprobs.h"

namespace flywheel {
namespace {

torch::Tensor LogSoftmax(const torch::Tensor& logits, double temperature) {
  // log_softmax in float32 at least: bf16 log-probs are too coarse for importance ratios.
  torch::Tensor x = logits.scalar_type() == torch::kDouble ? logits : logits.to(torch::kFloat);
  if (temperature != 1.0) x = x / temperature;
  return torch::log_softmax(x, -1);
}

}  // namespace

torch::Tensor TokenLogprobs(const torch::Tensor& logits, const torch::Tensor& targets,
                            double temperature) {
  return LogSoftmax(logits, temperature).gather(-1, targets.unsqueeze(-1)).squeeze(-1);
}

torch::Tensor TokenEntropy(const torch::Tensor& logits, double temperature) {
  const torch::Tensor logp = LogSoftmax(logits, temperature);
  return -(logp.exp() * logp).sum(-1);
}

}  // namespace flywheel
