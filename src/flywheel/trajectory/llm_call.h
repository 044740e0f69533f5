// What a proxy in front of any agent harness can record: the LLM calls of one agent execution,
// token in / token out, plus how the execution ended.
//
//   execution ──┬── call 1 (main)          context ────────▶ generated
//               ├── call 2 (main)          context = call 1 + tool output ▶ generated
//               ├── call 3 (sub-agent)     its own context ▶ generated
//               └── call 4 (main-summary)  summary prompt ▶ generated
//
// Only `generated` tokens were sampled by the policy; every context token is an observation,
// even where it repeats text the policy generated elsewhere.
#ifndef FLYWHEEL_TRAJECTORY_LLM_CALL_H_
#define FLYWHEEL_TRAJECTORY_LLM_CALL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/core/trajectory.h"

namespace flywheel {

struct LlmCall {
  std::string call_id;
  Role role = Role::kMain;
  std::vector<int32_t> context;
  std::vector<int32_t> generated;
  std::vector<float> logprobs;   // one per generated token: behaviour log μ
  std::vector<int64_t> versions;  // one per generated token: policy version
  int64_t start_unix_ns = 0;
  int64_t end_unix_ns = 0;

  // Message names the execution and call.
  absl::Status Validate(const std::string& execution_id, int64_t vocab_size = 0) const;
};

struct Execution {
  std::string execution_id;
  std::string group_id;
  std::string task_id;
  std::string env_name;
  std::vector<LlmCall> calls;
  Termination termination = Termination::kDone;
  std::optional<float> final_reward;   // set when the environment scored a finished episode
  std::optional<float> partial_score;  // progress score, asked for when the budget expired

  absl::Status Validate(int64_t vocab_size = 0) const;
};

// The reward an execution trains with. A finished execution uses its final reward; a timed-out
// one falls back to its partial score, so slow hard tasks are not dropped (dropping them biases
// training towards easy tasks). An execution with neither is an error, never a silent zero.
struct ExecutionReward {
  float reward = 0.0f;
  bool from_partial_score = false;
};
absl::StatusOr<ExecutionReward> RewardOf(const Execution& execution);

// The oldest and newest policy version of any generated token of `executions`; {0, 0} when
// they generated nothing.
struct VersionRange {
  int64_t min = 0;
  int64_t max = 0;
};
VersionRange BehaviourVersions(const std::vector<Execution>& executions);

}  // namespace flywheel

#endif  // FLYWHEEL_TRAJECTORY_LLM_CALL_H_
