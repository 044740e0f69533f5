// A branching agent harness for the `repair` task: runs one agent on a repair instance and
// records its LLM calls as an Execution, the way a proxy in front of a real harness would.
//
//   main:  [BOS report] test ─ report ─ sub-agent proposals ─ checkpoint
//            ├─ attempt 1: inspect/patch … test → fails ─┐
//            ├─ attempt 2 (retry: context = checkpoint) ◀─┘ … test → passes → submit
//            └─ past `summarize_after_tokens`: main-summary call (context + "summary"),
//               then main continues from [BOS report summary …]
//   sub-agent k (one per failing test, up to `max_subagents`): its own context
//            [BOS subgoal listing ; failure k] inspect N ─ line ─ patch proposal
//
// Every LLM call goes to a HarnessPolicy (harness_policy.h); the harness decodes the generated
// tokens into the action it gives the environment, so an action the environment rejects gets
// the environment's "invalid" observation and the agent goes on. A main attempt ends when the
// agent runs `test` and it fails (a retry, while `max_retries` allows), when it submits, or
// after `max_attempt_turns` main calls: the harness then runs the tests itself and retries or,
// on the last attempt, submits.
//
// The default policy is scripted (MakeScriptedRepairPolicy): the task's expert, with each
// planned patch replaced by a random one with probability `noise` (so tests fail and the agent
// retries), giving up at an attempt's start with probability `give_up`; log-probs are synthetic
// (uniform in [-2.5, -0.05]), versions 0. Everything is a function of the seed.
// actor/engine_harness_policy.h samples a transformer instead. Tokens come from a word tokenizer
// over the task's vocabulary plus the harness words.
#ifndef FLYWHEEL_TRAJECTORY_REPAIR_HARNESS_H_
#define FLYWHEEL_TRAJECTORY_REPAIR_HARNESS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/env/env_options.h"
#include "flywheel/model/word_tokenizer.h"
#include "flywheel/trajectory/harness_policy.h"
#include "flywheel/trajectory/llm_call.h"

namespace flywheel {

struct RepairHarnessOptions {
  RepairOptions repair{.num_lines = 8, .num_bugs = 2, .num_tests = 6, .max_turns = 400};
  int max_retries = 3;                   // retries from the checkpoint after a failed test run
  int max_subagents = 3;                 // sub-agents per execution, one per failing test
  int64_t summarize_after_tokens = 160;  // main context length that triggers a summary
  double noise = 0.4;                    // probability a planned patch is replaced by a random one
  double inspect_probability = 0.5;      // main inspects the line before patching it
  // Probability that the scripted agent submits instead of starting an attempt (the first one
  // included: every attempt starts from the same checkpoint context, so a policy cannot tell
  // them apart). A warm start that gives up leaves reinforcement learning persistence to learn,
  // as the flat job's search expert does.
  double give_up = 0;
  // Main calls per attempt before the harness runs the tests itself; 0 = 2 · num_bugs + 2
  // (the scripted agent never needs more).
  int64_t max_attempt_turns = 0;

  int64_t AttemptTurns() const {
    return max_attempt_turns > 0 ? max_attempt_turns : 2 * repair.num_bugs + 2;
  }
  absl::Status Validate() const;
};

// The words the harness adds to the task's vocabulary ("summary", "subgoal", "proposal").
absl::StatusOr<std::unique_ptr<WordTokenizer>> MakeRepairHarnessTokenizer(
    const RepairOptions& options);

// The scripted agent (expert plan with noise, synthetic log-probs) for the instance `seed`.
absl::StatusOr<std::unique_ptr<HarnessPolicy>> MakeScriptedRepairPolicy(
    const RepairHarnessOptions& options, uint64_t seed);

// One execution of the harness with the scripted agent on the repair instance `seed`
// (execution_id "repair-<seed>").
absl::StatusOr<Execution> RunRepairHarness(const RepairHarnessOptions& options, uint64_t seed);

// One execution on the instance `seed` with `policy` answering every call. The execution's
// group_id is "repair-<seed>" (executions of one instance form a group); `execution_id` empty
// means "repair-<seed>". A policy's vocabulary may be larger than the tokenizer's (a model
// whose vocab_size was rounded up): an action with a token the tokenizer does not know is
// unreadable, like any malformed action. A call whose per-token arrays disagree is an error
// naming the call.
absl::StatusOr<Execution> RunRepairHarness(const RepairHarnessOptions& options, uint64_t seed,
                                           HarnessPolicy& policy,
                                           const std::string& execution_id = "");

}  // namespace flywheel

#endif  // FLYWHEEL_TRAJECTORY_REPAIR_HARNESS_H_
