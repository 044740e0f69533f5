// The sampling distribution of the policy and its log-probabilities. The rollout engine samples
// from SamplingLogProbs and records the log-prob of the token it drew; the learner evaluates
// TokenLogprobs on its own forward pass. Both go through the same function, so on-policy the
// importance ratio exp(log π − log μ) is 1 up to float error. Definition (docs/sampling.md):
//
//   z = logits / temperature
//   S = all tokens; top_k > 0: S ∩= {i : z_i >= k-th largest z}   (ties at the k-th kept)
//   p = softmax(z restricted to S)
//   top_p < 1: S ∩= smallest prefix of tokens sorted by p (descending) whose mass reaches
//              top_p (a token is kept iff the mass strictly before it is < top_p; the most
//              likely token is always kept)
//   log μ(i) = z_i − logsumexp(z over S) for i in S, −inf otherwise
//
// Greedy decoding is top_k = 1 (log-prob 0); temperature must be > 0.
#ifndef FLYWHEEL_MODEL_SAMPLING_H_
#define FLYWHEEL_MODEL_SAMPLING_H_

#include <cstdint>
#include <random>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "flywheel/core/strings.h"

namespace flywheel {

struct SamplingParams {
  double temperature = 1.0;
  int64_t top_k = 0;    // 0 = no top-k truncation
  double top_p = 1.0;   // 1 = no nucleus truncation

  template <typename V>
  void VisitFields(V& v) {
    v.Field("temperature", temperature, "logits are divided by this (> 0)");
    v.Field("top_k", top_k, "keep the k most likely tokens (0 = all)");
    v.Field("top_p", top_p, "keep the smallest set of tokens with this much mass (1 = all)");
  }

  absl::Status Validate() const {
    if (!(temperature > 0)) {
      return absl::InvalidArgumentError(
          StrCat("sampling.temperature must be > 0, got ", temperature, " (use top_k = 1 for greedy)"));
    }
    if (top_k < 0) return absl::InvalidArgumentError("sampling.top_k must be >= 0");
    if (!(top_p > 0 && top_p <= 1)) {
      return absl::InvalidArgumentError(StrCat("sampling.top_p must be in (0, 1], got ", top_p));
    }
    return absl::OkStatus();
  }

  bool truncates() const { return top_k > 0 || top_p < 1.0; }
};

// Log-probabilities [..., V] of the distribution sampled from, for logits [..., V]; −inf for
// tokens outside the truncation set. Differentiable with respect to the logits (the set itself
// is not).
torch::Tensor SamplingLogProbs(const torch::Tensor& logits, const SamplingParams& params);

// log μ(target) for logits [..., V] and integer targets [...]: SamplingLogProbs gathered at the
// targets, computed in float32. Shape [...].
torch::Tensor TokenLogprobs(const torch::Tensor& logits, const torch::Tensor& targets,
                            const SamplingParams& params);

// Draws one token from a row of log-probabilities (`logprobs` points at V contiguous floats) by
// inverse CDF with one uniform draw from `rng`: the episode's own generator, so the same seed and
// logits give the same token whatever else runs in the process.
int64_t DrawToken(const float* logprobs, int64_t vocab_size, std::mt19937_64& rng);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_SAMPLING_H_
