// What an evaluation of a trained policy measured: episodes (or harness executions) played with
// fixed weights, nothing trained. Shared by the flat jobs' evaluation (policy_eval.h) and the
// tree job's (harness_eval.h), so that their summaries read alike.
#ifndef FLYWHEEL_RUNTIME_EVAL_RESULT_H_
#define FLYWHEEL_RUNTIME_EVAL_RESULT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace flywheel {

struct PolicyEvalResult {
  int64_t episodes = 0;
  int64_t version = 0;       // the evaluated weights' policy version
  double reward_mean = 0;    // mean final reward
  double reward_stderr = 0;  // standard error of that mean
  double success_rate = 0;   // share with final reward >= run.success_reward
  double seconds = 0;

  nlohmann::json ToJson() const;
};

// episodes, reward_mean, reward_stderr (0 for fewer than 2) and success_rate of `rewards`; the
// caller sets version and seconds.
PolicyEvalResult SummarizeEvalRewards(const std::vector<float>& rewards, double success_reward);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_EVAL_RESULT_H_
