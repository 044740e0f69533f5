// The whole training job in one process: actor threads, the in-process buffer and the learner.
//
//   async:      actor threads ──Insert──▶ Buffer ──Sample(groups)──▶ learner thread
//                    ▲                                                   │
//                    └──────── PublishSnapshot every publish_every ──────┘
//               The actors never stop; the buffer drops what is more than max_staleness
//               versions behind the learner.
//   colocated:  the synchronous baseline: every actor generates its share of one batch with
//               the current weights (Actor::Run(n)), the learner trains on it, publishes, repeat.
//
// The run ends after run.max_steps, run.max_wall_seconds or a stop request (options.stop), in
// each case within kStopBound (run_stop.h) with summary.json written ("stopped_by" says which).
// Every learner step appends one line to runs/<name>/metrics.jsonl; summary.json (with the
// latency audit) is written at the end; checkpoints every learner.checkpoint_every steps. With
// run.eval_episodes > 0 the final policy is then evaluated (policy_eval.h) into summary "eval".
#ifndef FLYWHEEL_RUNTIME_EMBEDDED_JOB_H_
#define FLYWHEEL_RUNTIME_EMBEDDED_JOB_H_

#include <atomic>
#include <cstdio>
#include <optional>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/runtime/policy_eval.h"

namespace flywheel {

struct EmbeddedJobOptions {
  bool resume = false;                // continue from the run's latest checkpoint
  // Set (by SIGINT / SIGTERM) to end the run within kStopBound (run_stop.h); borrowed.
  const std::atomic<bool>* stop = nullptr;
  std::FILE* progress = stdout;       // progress lines; nullptr = none
  bool progress_is_terminal = false;  // refresh one line in place
};

struct EmbeddedJobResult {
  int64_t steps = 0;           // learner steps taken in this process
  int64_t final_step = 0;      // optimiser step count at the end (includes resumed steps)
  double last_reward = 0;      // mean final reward of the last step's batch
  double last_success = 0;
  double best_success = 0;
  std::optional<PolicyEvalResult> eval;  // run.eval_episodes > 0: the final policy's evaluation
  nlohmann::json summary;      // what summary.json holds
};

absl::StatusOr<EmbeddedJobResult> RunEmbeddedJob(const JobConfig& config,
                                                 const EmbeddedJobOptions& options = {});

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_EMBEDDED_JOB_H_
