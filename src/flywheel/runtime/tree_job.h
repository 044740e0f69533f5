// The tree job: reinforcement learning on the repair task through a branching agent harness
// (retries, summaries, sub-agents), driven by the policy being trained, with the learner
// training on each execution as one prefix-sharing tree.
//
//   tree.imitation_steps steps of behaviour cloning on the scripted harness agent's executions
//   for step = 1 … run.max_steps:
//     for each of tree.instances_per_step repair instances, tree.executions_per_instance times:
//       RunRepairHarness(instance, EngineHarnessPolicy(engine))   ─▶ Execution (LLM calls with
//                                                                    log μ and versions)
//     append the executions to runs/<name>/calls.jsonl (trajectory/call_log.h format)
//     TreeLearner::Step(executions)  (trees, J_max, GRPO per instance, exact/dedup, loss)
//     every learner.publish_every steps: engine.PublishSnapshot(weights, version)
//     append a line to runs/<name>/metrics.jsonl
//
// Rollout and training alternate on one thread (the synchronous shape: each step's executions
// are sampled with the newest published weights).
#ifndef FLYWHEEL_RUNTIME_TREE_JOB_H_
#define FLYWHEEL_RUNTIME_TREE_JOB_H_

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/trajectory/llm_call.h"

namespace flywheel {

struct TreeJobRunOptions {
  std::FILE* progress = nullptr;  // one line per step when set
  bool keep_executions = false;   // return every execution (the benchmark reads them)
  // Set (by SIGINT / SIGTERM) to end the run within kStopBound (run_stop.h), as
  // run.max_wall_seconds does; borrowed.
  const std::atomic<bool>* stop = nullptr;
};

struct TreeJobResult {
  std::filesystem::path run_dir;
  int64_t steps = 0;  // reinforcement-learning steps (imitation steps not counted)
  int64_t version = 0;
  double first_reward = 0;  // mean reward of the first and the last step's executions
  double last_reward = 0;
  std::vector<nlohmann::json> metrics;  // the metrics.jsonl lines
  std::vector<Execution> executions;    // with keep_executions, in order
};

// Errors: env.kind other than repair, tree.enabled false, --resume (not supported), and any
// error of the harness, the engine or the learner, naming the step.
absl::StatusOr<TreeJobResult> RunTreeJob(const JobConfig& config, const TreeJobRunOptions& run);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_TREE_JOB_H_
