// Test support: random branching agent executions — a main conversation with retries from
// earlier points, summaries and sub-agents, all starting from BOS (token 0). Tokens are in
// [1, 40].
#ifndef FLYWHEEL_TRAJECTORY_RANDOM_EXECUTION_TESTING_H_
#define FLYWHEEL_TRAJECTORY_RANDOM_EXECUTION_TESTING_H_

#include <random>
#include <string>
#include <vector>

#include "flywheel/trajectory/llm_call.h"

namespace flywheel::testing {

inline LlmCall MakeCall(std::string id, Role role, std::vector<int32_t> context,
                        std::vector<int32_t> generated, float logprob = -0.5f) {
  LlmCall c;
  c.call_id = std::move(id);
  c.role = role;
  c.context = std::move(context);
  c.generated = std::move(generated);
  c.logprobs.assign(c.generated.size(), logprob);
  c.versions.assign(c.generated.size(), 3);
  return c;
}

// `prompt`: the tokens every call starts from (BOS + two random tokens when empty); executions
// of one GRPO group share theirs.
inline Execution RandomExecution(std::mt19937& rng, const std::string& id, int turns = 6,
                                 std::vector<int32_t> prompt = {}) {
  std::uniform_int_distribution<int> token(1, 40), len(1, 5), coin(0, 3);
  std::uniform_real_distribution<float> logprob(-3.0f, -0.05f);
  Execution e;
  e.execution_id = id;
  e.final_reward = 1.0f;
  if (prompt.empty()) prompt = {0, token(rng), token(rng)};  // BOS + prompt
  const size_t prompt_length = prompt.size();
  std::vector<int32_t> history = std::move(prompt);
  for (int turn = 0; turn < turns; ++turn) {
    std::vector<int32_t> generated;
    for (int i = len(rng); i > 0; --i) generated.push_back(token(rng));
    const Role role = static_cast<Role>(coin(rng));
    const std::string call_id = id + "-" + std::to_string(e.calls.size());
    if (coin(rng) == 0 && history.size() > prompt_length) {
      // a retry from an earlier point of the history
      std::vector<int32_t> earlier(history.begin(), history.begin() + prompt_length +
                                                        rng() % (history.size() - prompt_length));
      e.calls.push_back(MakeCall(call_id, role, earlier, generated, logprob(rng)));
      continue;
    }
    e.calls.push_back(MakeCall(call_id, role, history, generated, logprob(rng)));
    history.insert(history.end(), generated.begin(), generated.end());
    for (int i = len(rng); i > 0; --i) history.push_back(token(rng));  // observation
  }
  return e;
}

}  // namespace flywheel::testing

#endif  // FLYWHEEL_TRAJECTORY_RANDOM_EXECUTION_TESTING_H_
