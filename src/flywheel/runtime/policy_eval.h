// Evaluation of a trained policy: a fixed set of episodes played with fixed weights, nothing
// trained.
//
// The reward of a training batch is that of the policy that generated it, which in async mode
// is a few versions older than the learner's, and one batch is a small, task-dependent sample.
// To compare what two runs learned (e.g. async against colocated in `flywheel bench pipeline`),
// evaluate both final policies on the same episodes: the task stream and every episode's
// sampling seed derive only from `seed`, so two evaluations with the same seed play the same
// tasks with the same random numbers and their difference is the policies' alone.
#ifndef FLYWHEEL_RUNTIME_POLICY_EVAL_H_
#define FLYWHEEL_RUNTIME_POLICY_EVAL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/runtime/eval_result.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/runtime/policy_text.h"

namespace flywheel {

// Plays `episodes` episodes of `config`'s environment (as configured, latency included) with
// `weights` on one actor of `config.actor`'s settings and the job's tokenizer and turn format
// (`text`), on fresh tasks of one rollout each.
absl::StatusOr<PolicyEvalResult> EvaluatePolicy(const JobConfig& config, const EnvFactory& factory,
                                                const PolicyText& text,
                                                std::shared_ptr<const WeightSnapshot> weights,
                                                int64_t episodes, uint64_t seed);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_POLICY_EVAL_H_
