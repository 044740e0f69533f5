#include "flywheel/runtime/harness_eval.h"

#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "flywheel/actor/rollout_engine.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {

absl::StatusOr<PolicyEvalResult> EvaluateHarnessPolicy(
    const RepairHarnessOptions& harness, const RolloutEngineOptions& engine,
    EngineHarnessPolicyOptions policy, std::shared_ptr<const WeightSnapshot> weights,
    int64_t executions, uint64_t seed, double success_reward) {
  if (executions < 1) {
    return absl::InvalidArgumentError(StrCat("evaluation needs >= 1 execution, got ", executions));
  }
  if (weights == nullptr) return absl::InvalidArgumentError("evaluation needs weights");
  const absl::Time start = absl::Now();
  const int64_t version = weights->version;
  ASSIGN_OR_RETURN(const std::unique_ptr<RolloutEngine> rollout,
                   RolloutEngine::Create(engine, std::move(weights)));
  policy.seed = seed * 0x9E3779B97F4A7C15ull + 0x5851F42D4C957F2Dull;
  EngineHarnessPolicy sampler(rollout.get(), policy);
  std::vector<float> rewards;
  rewards.reserve(static_cast<size_t>(executions));
  for (int64_t i = 0; i < executions; ++i) {
    // Instances of their own range, apart from imitation's (2^40 up) and training's.
    const uint64_t instance = seed * 1000003ull + (3ull << 40) + static_cast<uint64_t>(i);
    absl::StatusOr<Execution> e =
        RunRepairHarness(harness, instance, sampler, StrCat("eval-", instance));
    if (!e.ok()) {
      return absl::Status(e.status().code(), StrCat("evaluation, instance ", instance, ": ",
                                                    ToStd(e.status().message())));
    }
    rewards.push_back(e->final_reward.value_or(0.0f));
  }
  PolicyEvalResult result = SummarizeEvalRewards(rewards, success_reward);
  result.version = version;
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return result;
}

}  // namespace flywheel
