// A transformer behind an agent harness: each LLM call of the harness becomes one turn of a
// rollout-engine sequence (prompt = the call's context), sampled until the end-of-turn token or
// `max_new_tokens`. Every generated token keeps the engine's behaviour log-prob and the version
// of the weights that produced it, so executions recorded through this policy train with the
// off-policy correction like any actor trajectory.
//
//   harness ──Generate(context)──▶ AddSequence(context) ─ StartTurn ─ Step … ─ RemoveSequence
//                                        engine ◀── PublishSnapshot (learner, any thread)
//
// Not thread-safe: one harness run at a time on the owner thread of `engine`.
#ifndef FLYWHEEL_ACTOR_ENGINE_HARNESS_POLICY_H_
#define FLYWHEEL_ACTOR_ENGINE_HARNESS_POLICY_H_

#include <cstdint>

#include "flywheel/actor/rollout_engine.h"
#include "flywheel/trajectory/harness_policy.h"

namespace flywheel {

struct EngineHarnessPolicyOptions {
  SamplingParams sampling;
  int64_t max_new_tokens = 16;  // an action longer than this is cut off (and likely invalid)
  int32_t end_of_turn = 2;      // the harness's end-of-action token
  uint64_t seed = 1;            // call k samples with seed + k: a run is reproducible
};

class EngineHarnessPolicy : public HarnessPolicy {
 public:
  EngineHarnessPolicy(RolloutEngine* engine, const EngineHarnessPolicyOptions& options)
      : engine_(engine), options_(options) {}

  absl::StatusOr<HarnessTurn> Generate(const HarnessRequest& request) override;

  int64_t calls() const { return calls_; }

 private:
  RolloutEngine* engine_;
  const EngineHarnessPolicyOptions options_;
  int64_t calls_ = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_ACTOR_ENGINE_HARNESS_POLICY_H_
