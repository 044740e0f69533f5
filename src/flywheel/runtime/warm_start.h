// The supervised stage ([sft], sft_options.h) every job runs before reinforcement learning:
// the environment's scripted expert plays episodes (or a file's conversations are read,
// sft_conversations.h), each laid out in tokens exactly as an actor lays out the policy's (the
// job's turn format: the environment's turns as prompt, the expert's actions and their stop token
// as generated), and the model is trained to maximise the log-likelihood of those actions' tokens
// (token mean over the step, packed as the learner packs, the forward in model.dtype), with an
// AdamW optimiser of its own. Reinforcement learning then starts from these weights with a fresh
// optimiser state.
//
// A job runs it once, before its first snapshot: a resumed run (whose checkpoint holds weights
// trained after it) skips it.
#ifndef FLYWHEEL_RUNTIME_WARM_START_H_
#define FLYWHEEL_RUNTIME_WARM_START_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/trajectory.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/model/transformer.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/runtime/policy_text.h"
#include "flywheel/runtime/run_stop.h"

namespace flywheel {

struct WarmStartResult {
  int64_t steps = 0;
  int64_t episodes = 0;
  double first_nll = 0;  // mean negative log-likelihood per expert token, first step
  double last_nll = 0;   // and last step (before its update)
  double expert_reward = 0;  // mean episode reward of the expert's episodes
  bool stopped = false;      // ended early by `stop` (fewer than sft.steps steps)
};

// `count` expert episodes of tasks from `seed`, as trajectories in `text`'s turn format (actions
// cut at actor.max_new_tokens tokens and max_turns turns, as an actor would cut them).
absl::StatusOr<std::vector<Trajectory>> ExpertTrajectories(const JobConfig& config,
                                                           const EnvFactory& factory,
                                                           const PolicyText& text, uint64_t seed,
                                                           int64_t count);

// config.sft.steps supervised steps on `model` (trained in place); ends early, between two steps,
// once `stop` (borrowed, may be null: the job's budget and stop signal) is reached.
absl::StatusOr<WarmStartResult> SupervisedWarmStart(const JobConfig& config,
                                                    const EnvFactory& factory,
                                                    const PolicyText& text, Transformer model,
                                                    const RunStop* stop = nullptr);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_WARM_START_H_
