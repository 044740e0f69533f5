// Advantages from rewards: group-normalised (GRPO), per-turn discounted returns, and the reward
// of a timed-out episode from its partial-progress score. Torch-free; V-trace, which needs the
// value head's outputs, is in vtrace.h. Formulas and citations: docs/algorithms.md.
#ifndef FLYWHEEL_LEARNER_ADVANTAGES_H_
#define FLYWHEEL_LEARNER_ADVANTAGES_H_

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/trajectory.h"
#include "flywheel/learner/learner_options.h"

namespace flywheel {

struct AdvantageOptions {
  AdvantageKind kind = AdvantageKind::kGrpo;
  double gamma = 1.0;
  double grpo_eps = 1e-6;
  double timeout_reward_scale = 1.0;

  static AdvantageOptions FromLearnerOptions(const LearnerOptions& o) {
    return {o.advantage, o.gamma, o.grpo_eps, o.timeout_reward_scale};
  }
};

// The outcome reward of an episode. A timed-out episode with a partial score earns
// timeout_reward_scale · partial_score (so slow hard tasks still teach); otherwise final_reward.
double EpisodeReward(const Trajectory& t, double timeout_reward_scale);

// GRPO over one group's rewards: (R_i − mean) / (std + eps), or R_i − mean without the std
// division. std is the population standard deviation (1/G), so a group of one gets 0.
std::vector<double> GroupNormalizedAdvantages(std::span<const double> rewards, bool divide_by_std,
                                              double eps);

// Per-turn discounted returns G_i = Σ_{j≥i} γ^{j−i} r_j. Turn j's reward is turn_rewards[j];
// tokens after the last turn end form an implicit final turn with reward 0; whatever the episode
// reward (EpisodeReward) holds beyond the turn rewards is received at the end of the last turn,
// so with γ = 1, G_0 is the episode reward. One entry per (possibly implicit) turn.
std::vector<double> TurnReturns(const Trajectory& t, double gamma, double timeout_reward_scale);

// Index of the turn each token belongs to, with the same implicit final turn as TurnReturns.
std::vector<int32_t> TokenTurns(const Trajectory& t);

// Per-token advantages for a batch, one vector per trajectory aligned with its tokens (0 on
// tokens that are not trainable). Groups are formed by group_id; an empty group_id is a group of
// its own. kVtrace is an error here: it needs value estimates (see vtrace.h).
absl::StatusOr<std::vector<std::vector<float>>> ComputeAdvantages(std::span<const Trajectory> batch,
                                                                  const AdvantageOptions& options);

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_ADVANTAGES_H_
