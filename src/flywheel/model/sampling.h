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
#include <vector>

#include <torch/torch.h>

#include "flywheel/model/sampling_params.h"

namespace flywheel {

// Log-probabilities [..., V] of the distribution sampled from, for logits [..., V]; −inf for
// tokens outside the truncation set. Differentiable with respect to the logits (the set itself
// is not).
torch::Tensor SamplingLogProbs(const torch::Tensor& logits, const SamplingParams& params);

// log μ(target) for logits [..., V] and integer targets [...]: SamplingLogProbs gathered at the
// targets, computed in float32. Shape [...].
torch::Tensor TokenLogprobs(const torch::Tensor& logits, const torch::Tensor& targets,
                            const SamplingParams& params);

// Draws one token from a row of probabilities (`probs` points at V contiguous floats, the exp of
// SamplingLogProbs; they need not sum to exactly 1) by inverse CDF with one uniform draw from
// `rng`: the episode's own generator, so the same seed and logits give the same token whatever
// else runs in the process. A token of probability 0 is never drawn.
int64_t DrawToken(const float* probs, int64_t vocab_size, std::mt19937_64& rng);

// SamplingLogProbs of one row in plain C++, for a sampler that holds its logits in a contiguous
// float buffer (the rollout engine): `logits` and `logprobs` point at `vocab_size` floats each
// (they may be the same buffer). The same definition and the same float32 arithmetic as the
// LibTorch version; results agree to float rounding (a top-p boundary that falls within rounding
// of top_p may be decided differently, as between any two float implementations).
void SamplingLogProbsRow(const float* logits, int64_t vocab_size, const SamplingParams& params,
                         float* logprobs);

// One draw from a row of logits: fills `logprobs` (SamplingLogProbsRow) and `probs` (their exp),
// draws with DrawToken and returns the token; its log-prob is logprobs[token].
int64_t SampleRow(const float* logits, int64_t vocab_size, const SamplingParams& params,
                  std::mt19937_64& rng, float* logprobs, float* probs);

// SampleRow for a batch, computed where `logits` [B, V] are (a GPU: B tokens and log-probs come
// back to the host instead of B x V logits). Row b uses *params[b] and takes one uniform from
// *rngs[b], as DrawToken does, so an episode's tokens depend on its own generator alone; the token
// is SampleRow's up to float rounding at the boundary between two tokens' cumulative mass.
struct SampledRows {
  std::vector<int64_t> tokens;
  std::vector<float> logprobs;  // log-prob of each drawn token under its row's sampling
};
SampledRows SampleRows(const torch::Tensor& logits, const std::vector<const SamplingParams*>& params,
                       const std::vector<std::mt19937_64*>& rngs);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_SAMPLING_H_
