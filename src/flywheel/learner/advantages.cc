#include "flywheel/learner/advantages.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

// Turn ends with the implicit final turn appended when the turns do not cover every token.
std::vector<int64_t> TurnEnds(const Trajectory& t) {
  std::vector<int64_t> ends(t.turn_ends.begin(), t.turn_ends.end());
  if (ends.empty() || ends.back() < t.size()) ends.push_back(t.size());
  return ends;
}

// One advantage per (member, turn) of one group; every token of a turn gets its turn's value.
std::vector<std::vector<double>> GroupTurnAdvantages(std::span<const Trajectory> batch,
                                                     const std::vector<size_t>& members,
                                                     const AdvantageOptions& options) {
  std::vector<std::vector<double>> returns;
  for (size_t i : members) {
    returns.push_back(TurnReturns(batch[i], options.gamma, options.timeout_reward_scale));
  }
  switch (options.kind) {
    case AdvantageKind::kTurnReturn: {
      // Baseline: the group mean of the return from the start, G_0 (state-independent, so the
      // estimator stays unbiased).
      double baseline = 0;
      for (const std::vector<double>& g : returns) baseline += g.front();
      baseline /= static_cast<double>(returns.size());
      for (std::vector<double>& g : returns) {
        for (double& v : g) v -= baseline;
      }
      return returns;
    }
    case AdvantageKind::kTurnGrpo: {
      // Turn j of every member that has one is compared with the same turn of the others.
      size_t turns = 0;
      for (const std::vector<double>& g : returns) turns = std::max(turns, g.size());
      std::vector<std::vector<double>> adv(returns.size());
      for (size_t j = 0; j < turns; ++j) {
        std::vector<double> at_j;
        for (const std::vector<double>& g : returns) {
          if (j < g.size()) at_j.push_back(g[j]);
        }
        const std::vector<double> normalized =
            GroupNormalizedAdvantages(at_j, /*divide_by_std=*/true, options.grpo_eps);
        size_t next = 0;
        for (size_t m = 0; m < returns.size(); ++m) {
          if (j < returns[m].size()) adv[m].push_back(normalized[next++]);
        }
      }
      return adv;
    }
    default: {
      // GRPO: one value per trajectory, from its episode reward.
      std::vector<double> rewards;
      for (size_t i : members) {
        rewards.push_back(EpisodeReward(batch[i], options.timeout_reward_scale));
      }
      const std::vector<double> adv = GroupNormalizedAdvantages(
          rewards, options.kind == AdvantageKind::kGrpo, options.grpo_eps);
      for (size_t m = 0; m < returns.size(); ++m) returns[m].assign(returns[m].size(), adv[m]);
      return returns;
    }
  }
}

}  // namespace

double EpisodeReward(const Trajectory& t, double timeout_reward_scale) {
  if (t.termination == Termination::kTimeout && t.partial_score.has_value()) {
    return timeout_reward_scale * static_cast<double>(*t.partial_score);
  }
  return t.final_reward;
}

std::vector<double> GroupNormalizedAdvantages(std::span<const double> rewards, bool divide_by_std,
                                              double eps) {
  std::vector<double> out(rewards.size(), 0.0);
  if (rewards.empty()) return out;
  const double n = static_cast<double>(rewards.size());
  double mean = 0;
  for (double r : rewards) mean += r;
  mean /= n;
  double var = 0;
  for (double r : rewards) var += (r - mean) * (r - mean);
  const double std = std::sqrt(var / n);
  for (size_t i = 0; i < rewards.size(); ++i) {
    out[i] = divide_by_std ? (rewards[i] - mean) / (std + eps) : rewards[i] - mean;
  }
  return out;
}

std::vector<double> TurnReturns(const Trajectory& t, double gamma, double timeout_reward_scale) {
  const std::vector<int64_t> ends = TurnEnds(t);
  std::vector<double> rewards(ends.size(), 0.0);
  double turn_total = 0;
  for (size_t j = 0; j < t.turn_rewards.size() && j < rewards.size(); ++j) {
    rewards[j] = t.turn_rewards[j];
    turn_total += t.turn_rewards[j];
  }
  // What the episode earned beyond its turns (an outcome reward, or a timeout's partial score
  // replacing them) arrives at the end, so that with γ = 1 the return from the start is exactly
  // the episode reward GRPO uses.
  rewards.back() += EpisodeReward(t, timeout_reward_scale) - turn_total;
  std::vector<double> returns(ends.size(), 0.0);
  double next = 0;
  for (size_t j = ends.size(); j-- > 0;) {
    next = rewards[j] + gamma * next;
    returns[j] = next;
  }
  return returns;
}

std::vector<int32_t> TokenTurns(const Trajectory& t) {
  const std::vector<int64_t> ends = TurnEnds(t);
  std::vector<int32_t> turn(t.tokens.size(), 0);
  size_t j = 0;
  for (int64_t i = 0; i < t.size(); ++i) {
    while (j + 1 < ends.size() && i >= ends[j]) ++j;
    turn[i] = static_cast<int32_t>(j);
  }
  return turn;
}

absl::StatusOr<std::vector<std::vector<float>>> ComputeAdvantages(std::span<const Trajectory> batch,
                                                                  const AdvantageOptions& options) {
  if (options.kind == AdvantageKind::kVtrace) {
    return absl::FailedPreconditionError(
        "learner.advantage = \"vtrace\" needs value estimates from a value head; compute them "
        "with VtraceTargets");
  }
  for (const Trajectory& t : batch) RETURN_IF_ERROR(Annotate(t.Validate(), "advantages"));
  // Members of each group, in batch order.
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t i = 0; i < batch.size(); ++i) {
    const std::string key = batch[i].group_id.empty() ? StrCat("\x01solo:", i) : batch[i].group_id;
    groups[key].push_back(i);
  }

  std::vector<std::vector<float>> out(batch.size());
  for (const auto& [key, members] : groups) {
    const std::vector<std::vector<double>> adv = GroupTurnAdvantages(batch, members, options);
    for (size_t m = 0; m < members.size(); ++m) {
      const Trajectory& t = batch[members[m]];
      const std::vector<int32_t> turn = TokenTurns(t);
      std::vector<float>& a = out[members[m]];
      a.assign(t.tokens.size(), 0.0f);
      for (int64_t k = 0; k < t.size(); ++k) {
        if (t.trainable[k]) a[k] = static_cast<float>(adv[m][turn[k]]);
      }
    }
  }
  return out;
}

}  // namespace flywheel
