#include "flywheel/env/policy.h"

#include <random>

#include "flywheel/core/status_macros.h"

namespace flywheel {
namespace {

class RandomWordPolicy : public Policy {
 public:
  RandomWordPolicy(std::vector<std::string> words, uint64_t seed)
      : words_(std::move(words)), rng_(seed) {}
  void Begin(const TaskInstance&, std::string_view) override {}
  std::string Act(std::string_view) override {
    return words_[std::uniform_int_distribution<size_t>(0, words_.size() - 1)(rng_)];
  }

 private:
  const std::vector<std::string> words_;
  std::mt19937_64 rng_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Policy>> MakeRandomWordPolicy(const VocabularySpec& vocabulary,
                                                             uint64_t seed) {
  if (vocabulary.kind != VocabularySpec::kWords || vocabulary.words.empty()) {
    return absl::InvalidArgumentError(
        "a random word policy needs an environment with a word vocabulary");
  }
  return std::unique_ptr<Policy>(std::make_unique<RandomWordPolicy>(vocabulary.words, seed));
}

absl::StatusOr<EpisodeSummary> RunEpisode(Environment& env, Policy& policy,
                                          const TaskInstance& task, int64_t max_steps) {
  EpisodeSummary summary;
  ASSIGN_OR_RETURN(StepResult first, env.Reset(task));
  policy.Begin(task, first.observation);
  std::string observation = first.observation;
  while (summary.steps < max_steps) {
    ASSIGN_OR_RETURN(StepResult r, env.Step(policy.Act(observation)));
    ++summary.steps;
    summary.total_reward += r.reward;
    if (r.partial_score) summary.partial_score = r.partial_score;
    if (r.done) {
      summary.end = r.end == EpisodeEnd::kRunning ? EpisodeEnd::kDone : r.end;
      env.Close();
      return summary;
    }
    observation = std::move(r.observation);
  }
  ASSIGN_OR_RETURN(double score, env.ScorePartial());
  summary.partial_score = score;
  summary.end = EpisodeEnd::kTimeout;
  env.Close();
  return summary;
}

}  // namespace flywheel
