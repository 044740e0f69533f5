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
// run.mode = "colocated": rollout and training alternate on one thread (the synchronous shape:
// each step's executions are sampled with the newest published weights).
// run.mode = "async" (the default): actor.num_actors harness actors (runtime/harness_actors.h)
// play instances without pause and insert each instance's executions, one group, into an
// in-memory buffer; the learner takes tree.instances_per_step groups per step. The buffer drops
// groups more than learner.max_staleness versions behind; the loss corrects the rest per token
// with the recorded behaviour log-probs (learner.loss). run.max_pipeline_batches > 0 bounds the
// instances played or waiting to that many learner batches, so that actors do not play what
// the staleness bound will drop.
//
// Checkpoints every learner.checkpoint_every steps and at the end (when checkpoint_every > 0):
// the model, the optimiser state and tree_job.json (imitation and reinforcement steps done);
// --resume continues from the newest one, on instances the run has not played.
// run.eval_episodes > 0: the final policy then plays that many executions, one per instance, on
// instances of their own (runtime/harness_eval.h), into summary "eval" and the result.
#ifndef FLYWHEEL_RUNTIME_TREE_JOB_H_
#define FLYWHEEL_RUNTIME_TREE_JOB_H_

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/runtime/eval_result.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/trajectory/llm_call.h"

namespace flywheel {

struct TreeJobRunOptions {
  std::FILE* progress = nullptr;  // one line per step when set
  bool keep_executions = false;   // return every execution (the benchmark reads them)
  bool resume = false;            // continue from the run's newest checkpoint
  // Set (by SIGINT / SIGTERM) to end the run within kStopBound (run_stop.h), as
  // run.max_wall_seconds does; borrowed.
  const std::atomic<bool>* stop = nullptr;
};

struct TreeJobResult {
  std::filesystem::path run_dir;
  int64_t steps = 0;  // reinforcement-learning steps, resumed ones included (not imitation)
  int64_t version = 0;
  double first_reward = 0;  // mean reward of this process's first and last step's executions
  double last_reward = 0;
  std::vector<nlohmann::json> metrics;  // the reinforcement steps' metrics.jsonl lines
  std::vector<Execution> executions;    // with keep_executions, in order
  std::optional<PolicyEvalResult> eval;  // run.eval_episodes > 0: the final policy's evaluation
};

// The optimiser steps the learning-rate schedule spans: learner.total_steps, or else the
// imitation and reinforcement steps together (tree.imitation_steps + run.max_steps). A run with
// fewer run.max_steps than another therefore also decays its imitation sooner; to reproduce a
// longer run's imitated policy, set learner.total_steps to that run's horizon.
int64_t TreeJobScheduleSteps(const JobConfig& config);

// Errors: env.kind other than repair, tree.enabled false, run.mode = "elastic", --resume
// without a checkpoint, and any error of the harness, the engine, the actors or the learner,
// naming the step.
absl::StatusOr<TreeJobResult> RunTreeJob(const JobConfig& config, const TreeJobRunOptions& run);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_TREE_JOB_H_
