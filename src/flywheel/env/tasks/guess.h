// guess: find a hidden number in [0, range) from "higher" / "lower" feedback.
//
// Multi-turn credit assignment on the smallest possible text: reset shows "go", an action is a
// number ("7"), an observation is one word ("higher", "lower", "correct", "invalid"). Reward 1
// for finding the number within max_guesses, else 0; with progress_reward > 0 each guess also
// earns progress_reward times the share of the range its feedback ruled out (dense credit: 0 for
// a guess the earlier feedback already excluded, most for the middle of the interval). Binary search always succeeds when
// max_guesses >= ceil(log2(range + 1)); a random guesser succeeds with probability about
// 1 - (1 - 1/range)^max_guesses (0.32 at the defaults).
#ifndef FLYWHEEL_ENV_TASKS_GUESS_H_
#define FLYWHEEL_ENV_TASKS_GUESS_H_

#include <memory>
#include <random>

#include "flywheel/env/env_options.h"
#include "flywheel/env/interface.h"
#include "flywheel/env/policy.h"

namespace flywheel {

class GuessEnv : public Environment {
 public:
  explicit GuessEnv(const GuessOptions& options);

  absl::StatusOr<StepResult> Reset(const TaskInstance& task) override;
  absl::StatusOr<StepResult> Step(std::string_view action) override;
  absl::StatusOr<double> ScorePartial() override;
  const VocabularySpec& vocabulary() const override { return vocabulary_; }
  std::string DebugString() const override;

 private:
  double Progress() const;

  const GuessOptions options_;
  const VocabularySpec vocabulary_;
  bool started_ = false;
  bool done_ = false;
  int64_t hidden_ = 0;
  int64_t guesses_ = 0;
  int64_t lo_ = 0, hi_ = 0;  // interval still consistent with the feedback so far
};

// Binary search over the interval consistent with the feedback.
std::unique_ptr<Policy> MakeGuessExpert(const GuessOptions& options);
// A uniformly random number each turn.
std::unique_ptr<Policy> MakeGuessRandom(const GuessOptions& options, uint64_t seed);

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_TASKS_GUESS_H_
