// Scripted policies for the built-in tasks: an expert (solves the task; used by tests and as an
// optional warm start) and a random one (the baseline an RL-trained model must beat).
// A policy plays one episode at a time and is not thread-safe.
#ifndef FLYWHEEL_ENV_POLICY_H_
#define FLYWHEEL_ENV_POLICY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "flywheel/env/interface.h"

namespace flywheel {

class Policy {
 public:
  virtual ~Policy() = default;
  // Called at the start of an episode with the task and the first observation.
  virtual void Begin(const TaskInstance& task, std::string_view observation) = 0;
  // The next action given the latest observation.
  virtual std::string Act(std::string_view observation) = 0;
};

// One uniformly random word of a word vocabulary per turn: a baseline for any word-level
// environment, external ones included. InvalidArgument for a byte vocabulary.
absl::StatusOr<std::unique_ptr<Policy>> MakeRandomWordPolicy(const VocabularySpec& vocabulary,
                                                             uint64_t seed);

struct EpisodeSummary {
  double total_reward = 0;
  int64_t steps = 0;
  EpisodeEnd end = EpisodeEnd::kRunning;
  std::optional<double> partial_score;  // last one reported
};

// Plays one episode synchronously, stopping after `max_steps` actions (the episode is then
// scored with ScorePartial and marked kTimeout). Latency is ignored here.
absl::StatusOr<EpisodeSummary> RunEpisode(Environment& env, Policy& policy,
                                          const TaskInstance& task, int64_t max_steps);

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_POLICY_H_
