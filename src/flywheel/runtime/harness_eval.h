// Evaluation of a tree-job policy: executions of the repair harness played with fixed weights
// on instances of their own, nothing trained. The tree job's counterpart of policy_eval.h
// (run.eval_episodes), so that what RL added can be measured as for the flat jobs: the same
// evaluation of the imitated policy and of the final one.
//
// The instances and every call's sampling seed derive only from `seed`, so two evaluations with
// the same seed play the same instances with the same random numbers: their difference is the
// weights' alone.
#ifndef FLYWHEEL_RUNTIME_HARNESS_EVAL_H_
#define FLYWHEEL_RUNTIME_HARNESS_EVAL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "flywheel/actor/engine_harness_policy.h"
#include "flywheel/actor/rollout_options.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/runtime/eval_result.h"
#include "flywheel/trajectory/repair_harness.h"

namespace flywheel {

// Plays `executions` executions of `harness`, one per instance, with `weights` sampled through
// `policy` (its seed is replaced by one derived from `seed`) on one engine of `engine`'s
// settings, on this thread. An execution succeeds when its final reward is >= success_reward;
// one without a final reward (its turns ran out) counts as reward 0.
absl::StatusOr<PolicyEvalResult> EvaluateHarnessPolicy(
    const RepairHarnessOptions& harness, const RolloutEngineOptions& engine,
    EngineHarnessPolicyOptions policy, std::shared_ptr<const WeightSnapshot> weights,
    int64_t executions, uint64_t seed, double success_reward);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_HARNESS_EVAL_H_
