// copy: repeat a digit string of heavy-tailed length, then say "end".
//
//   reset   → "3 1 4 1 5"
//   action  "3 1 4 1 5 end"  → "correct", reward 1, done
//   action  "3 1 4 end"      → "wrong", reward 0.5, done   (3 of the 6 target words in place)
//
// A single-turn workload whose generation length is what varies: the string's length L is drawn
// from a bounded Pareto on [min_length, max_length] (CopyLengthDistribution below), so most
// answers are a few tokens and a few are ten times longer, and a policy that has learned the
// task generates L + 2 tokens (digits, "end", end-of-turn) per episode. The answer is scored
// word by word against the target "d1 … dL end": reward = correct positions / max(L + 1, words
// answered), so it is dense (every right digit counts), a too long answer is penalised as a too
// short one is, and the reward is 1 exactly when the answer is the target.
#ifndef FLYWHEEL_ENV_TASKS_COPY_H_
#define FLYWHEEL_ENV_TASKS_COPY_H_

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "flywheel/env/env_options.h"
#include "flywheel/env/interface.h"
#include "flywheel/env/policy.h"

namespace flywheel {

// The word that ends an answer. An answer cut off by actor.max_new_tokens lacks it, so it is
// never exact.
inline constexpr std::string_view kCopyEndMarker = "end";

// Tokens a complete answer of the longest string takes: max_length digits, the end marker and
// the policy's end-of-turn token. actor.max_new_tokens must be at least this (JobConfig checks).
inline int64_t CopyAnswerTokens(const CopyOptions& options) { return options.max_length + 2; }

// The string's length: a Pareto with tail index alpha and scale m = min_length, truncated to
// [m, H) with H = max_length + 1 and floored:
//   P(L >= l) = ((m / l)^alpha - (m / H)^alpha) / (1 - (m / H)^alpha),   m <= l <= max_length,
// drawn by inverting the CDF: x = m / (1 - u (1 - (m / H)^alpha))^(1 / alpha), u ~ U[0, 1).
// At the defaults (4, 64, 1.2): p50 6, p90 21, p99 53, mean 10.
class CopyLengthDistribution {
 public:
  explicit CopyLengthDistribution(const CopyOptions& options);
  int64_t operator()(std::mt19937_64& rng) const;

 private:
  const int64_t min_length_, max_length_;
  const double alpha_;
  const double mass_;  // 1 - (m / H)^alpha: the untruncated Pareto's mass below H
};

class CopyEnv : public Environment {
 public:
  explicit CopyEnv(const CopyOptions& options);

  absl::StatusOr<StepResult> Reset(const TaskInstance& task) override;
  absl::StatusOr<StepResult> Step(std::string_view action) override;
  absl::StatusOr<double> ScorePartial() override;
  const VocabularySpec& vocabulary() const override { return vocabulary_; }
  std::string DebugString() const override;

 private:
  const CopyOptions options_;
  const VocabularySpec vocabulary_;
  const CopyLengthDistribution lengths_;
  bool started_ = false;
  bool done_ = false;
  std::vector<std::string> target_;  // the digits, then kCopyEndMarker
  double score_ = 0;                 // of the answer, once given
};

// Answers with the digits it was shown and the end marker: always reward 1.
std::unique_ptr<Policy> MakeCopyExpert();
// Random digits, as many as it was shown, and the end marker: it knows the format, not the
// content (mean reward (L / alphabet + 1) / (L + 1): 0.22 at the defaults).
std::unique_ptr<Policy> MakeCopyRandom(const CopyOptions& options, uint64_t seed);

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_TASKS_COPY_H_
