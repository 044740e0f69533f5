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
// The "policy" is scripted: the task's expert, with each planned patch replaced by a random
// one with probability `noise` (so tests fail and the agent retries); tokens come from a
// word tokenizer over the task's vocabulary plus the harness words, and log-probs are
// synthetic (uniform in [-2.5, -0.05]). Everything is a function of the seed.
#ifndef FLYWHEEL_TRAJECTORY_REPAIR_HARNESS_H_
#define FLYWHEEL_TRAJECTORY_REPAIR_HARNESS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/env/env_options.h"
#include "flywheel/model/word_tokenizer.h"
#include "flywheel/trajectory/llm_call.h"

namespace flywheel {

struct RepairHarnessOptions {
  RepairOptions repair{.num_lines = 8, .num_bugs = 2, .num_tests = 6, .max_turns = 400};
  int max_retries = 3;          // retries from the checkpoint after a failed test run
  int max_subagents = 3;        // sub-agents per execution, one per failing test
  int64_t summarize_after_tokens = 160;  // main context length that triggers a summary
  double noise = 0.4;           // probability a planned patch is replaced by a random one
  double inspect_probability = 0.5;  // main inspects the line before patching it
};

// The words the harness adds to the task's vocabulary ("summary", "subgoal", "proposal").
absl::StatusOr<std::unique_ptr<WordTokenizer>> MakeRepairHarnessTokenizer(
    const RepairOptions& options);

// One execution of the harness on the repair instance `seed` (execution_id "repair-<seed>").
absl::StatusOr<Execution> RunRepairHarness(const RepairHarnessOptions& options, uint64_t seed);

}  // namespace flywheel

#endif  // FLYWHEEL_TRAJECTORY_REPAIR_HARNESS_H_
