#include "flywheel/trajectory/execution_record.h"

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {

absl::StatusOr<Trajectory> ExecutionToTrajectory(const Execution& execution,
                                                 const std::string& actor_id) {
  RETURN_IF_ERROR(execution.Validate());
  ASSIGN_OR_RETURN(const ExecutionReward reward, RewardOf(execution));
  Trajectory t;
  t.id = execution.execution_id;
  t.execution_id = execution.execution_id;
  t.group_id = execution.group_id;
  t.task_id = execution.task_id;
  t.env_name = execution.env_name;
  t.actor_id = actor_id;
  for (const LlmCall& call : execution.calls) {
    for (int32_t token : call.context) t.AppendPrompt(token);
    for (size_t i = 0; i < call.generated.size(); ++i) {
      t.AppendGenerated(call.generated[i], call.logprobs[i], call.versions[i]);
    }
    t.turn_ends.push_back(static_cast<int32_t>(t.tokens.size()));
    t.turn_rewards.push_back(0.0f);
    t.call_roles.push_back(call.role);
  }
  t.final_reward = reward.reward;
  t.partial_score = execution.partial_score;
  t.termination = execution.termination;
  t.created_unix_ns = execution.calls.front().start_unix_ns;
  t.finished_unix_ns = execution.calls.back().end_unix_ns;
  RETURN_IF_ERROR(t.Validate());
  return t;
}

absl::StatusOr<Execution> TrajectoryToExecution(const Trajectory& t) {
  if (t.call_roles.empty()) {
    return absl::InvalidArgumentError(
        StrCat("trajectory '", t.id,
               "' is a plain path, not a recorded execution (it has no call_roles)"));
  }
  RETURN_IF_ERROR(t.Validate());
  Execution e;
  e.execution_id = t.execution_id;
  e.group_id = t.group_id;
  e.task_id = t.task_id;
  e.env_name = t.env_name;
  e.termination = t.termination;
  e.final_reward = t.final_reward;
  e.partial_score = t.partial_score;
  int32_t begin = 0;
  for (size_t c = 0; c < t.call_roles.size(); ++c) {
    LlmCall call;
    call.call_id = StrCat(t.execution_id, "-", c);
    call.role = t.call_roles[c];
    call.start_unix_ns = call.end_unix_ns = static_cast<int64_t>(c);
    for (int32_t i = begin; i < t.turn_ends[c]; ++i) {
      if (!t.trainable[i]) {
        if (!call.generated.empty()) {
          return absl::InvalidArgumentError(
              StrCat("trajectory '", t.id, "' call ", c, ": context token at index ", i,
                     " after a generated one; a call is its context, then its generated tokens"));
        }
        call.context.push_back(t.tokens[i]);
        continue;
      }
      call.generated.push_back(t.tokens[i]);
      call.logprobs.push_back(t.logprobs[i]);
      call.versions.push_back(t.versions[i]);
    }
    begin = t.turn_ends[c];
    e.calls.push_back(std::move(call));
  }
  RETURN_IF_ERROR(e.Validate());
  return e;
}

}  // namespace flywheel
