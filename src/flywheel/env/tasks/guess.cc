#include "flywheel/env/tasks/guess.h"

#include <algorithm>
#include <charconv>

#include "flywheel/core/strings.h"
#include "flywheel/env/task_source.h"
#include "flywheel/env/tasks/text.h"

namespace flywheel {
namespace {

VocabularySpec GuessVocabulary(int64_t range) {
  std::vector<std::string> words = {"go", "higher", "lower", "correct", "invalid"};
  for (int64_t i = 0; i < range; ++i) words.push_back(std::to_string(i));
  return VocabularySpec::Words(std::move(words));
}

class GuessExpert : public Policy {
 public:
  explicit GuessExpert(int64_t range) : range_(range) {}
  void Begin(const TaskInstance&, std::string_view) override {
    lo_ = 0;
    hi_ = range_ - 1;
    last_ = -1;
  }
  std::string Act(std::string_view observation) override {
    if (observation == "higher") lo_ = last_ + 1;
    if (observation == "lower") hi_ = last_ - 1;
    last_ = lo_ + (hi_ - lo_) / 2;
    return std::to_string(last_);
  }

 private:
  const int64_t range_;
  int64_t lo_ = 0, hi_ = 0, last_ = -1;
};

class GuessRandom : public Policy {
 public:
  GuessRandom(int64_t range, uint64_t seed) : range_(range), rng_(seed) {}
  void Begin(const TaskInstance&, std::string_view) override {}
  std::string Act(std::string_view) override {
    return std::to_string(std::uniform_int_distribution<int64_t>(0, range_ - 1)(rng_));
  }

 private:
  const int64_t range_;
  std::mt19937_64 rng_;
};

}  // namespace

GuessEnv::GuessEnv(const GuessOptions& options)
    : options_(options), vocabulary_(GuessVocabulary(options.range)) {}

absl::StatusOr<StepResult> GuessEnv::Reset(const TaskInstance& task) {
  std::mt19937_64 rng(MixSeed(task.seed));
  hidden_ = std::uniform_int_distribution<int64_t>(0, options_.range - 1)(rng);
  guesses_ = 0;
  lo_ = 0;
  hi_ = options_.range - 1;
  started_ = true;
  done_ = false;
  StepResult r;
  r.observation = "go";
  r.partial_score = 0;
  return r;
}

absl::StatusOr<StepResult> GuessEnv::Step(std::string_view action) {
  if (!started_) return absl::FailedPreconditionError("guess: step before reset");
  if (done_) return absl::FailedPreconditionError("guess: step after the episode ended");
  ++guesses_;
  const double progress_before = Progress();
  StepResult r;
  std::optional<int64_t> guess = ParseInt(Trim(action));
  if (!guess || *guess < 0 || *guess >= options_.range) {
    r.observation = "invalid";
  } else if (*guess == hidden_) {
    r.observation = "correct";
    r.reward = 1;
    lo_ = hi_ = hidden_;
    done_ = true;
  } else if (*guess < hidden_) {
    r.observation = "higher";
    lo_ = std::max(lo_, *guess + 1);
  } else {
    r.observation = "lower";
    hi_ = std::min(hi_, *guess - 1);
  }
  if (guesses_ >= options_.max_guesses) done_ = true;
  r.done = done_;
  if (done_) r.end = EpisodeEnd::kDone;
  r.partial_score = Progress();
  // The share of the range this guess's feedback ruled out: the episode's progress rewards sum
  // to progress_reward x its final progress. Early guesses, where a good one rules out much, get
  // most of this credit; late ones are credited mainly by finding the number.
  r.reward += options_.progress_reward * (*r.partial_score - progress_before);
  return r;
}

// How far the feedback has narrowed the search: 0 at the start, 1 when the number is known.
double GuessEnv::Progress() const {
  return 1.0 - static_cast<double>(hi_ - lo_) / static_cast<double>(options_.range - 1);
}

absl::StatusOr<double> GuessEnv::ScorePartial() {
  if (!started_) return absl::FailedPreconditionError("guess: score before reset");
  return Progress();
}

std::string GuessEnv::DebugString() const {
  return StrCat("guess(range=", options_.range, ", max_guesses=", options_.max_guesses, ")");
}

std::unique_ptr<Policy> MakeGuessExpert(const GuessOptions& options) {
  return std::make_unique<GuessExpert>(options.range);
}

std::unique_ptr<Policy> MakeGuessRandom(const GuessOptions& options, uint64_t seed) {
  return std::make_unique<GuessRandom>(options.range, seed);
}

}  // namespace flywheel
