#include "flywheel/runtime/eval_result.h"

#include <algorithm>
#include <cmath>

namespace flywheel {

nlohmann::json PolicyEvalResult::ToJson() const {
  return {{"episodes", episodes},         {"version", version},
          {"reward_mean", reward_mean},   {"reward_stderr", reward_stderr},
          {"success_rate", success_rate}, {"seconds", seconds}};
}

PolicyEvalResult SummarizeEvalRewards(const std::vector<float>& rewards, double success_reward) {
  PolicyEvalResult result;
  result.episodes = static_cast<int64_t>(rewards.size());
  if (rewards.empty()) return result;
  double sum = 0, sum_sq = 0;
  int64_t successes = 0;
  for (const float r : rewards) {
    sum += r;
    sum_sq += static_cast<double>(r) * r;
    successes += r >= success_reward;
  }
  const double n = static_cast<double>(result.episodes);
  result.reward_mean = sum / n;
  result.success_rate = static_cast<double>(successes) / n;
  if (result.episodes > 1) {
    const double variance =
        std::max(0.0, (sum_sq - n * result.reward_mean * result.reward_mean) / (n - 1));
    result.reward_stderr = std::sqrt(variance / n);
  }
  return result;
}

}  // namespace flywheel
