#include "flywheel/runtime/policy_eval.h"

#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "flywheel/actor/actor.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/env/env_executor.h"
#include "flywheel/env/task_source.h"

namespace flywheel {

absl::StatusOr<PolicyEvalResult> EvaluatePolicy(const JobConfig& config, const EnvFactory& factory,
                                                const PolicyText& text,
                                                std::shared_ptr<const WeightSnapshot> weights,
                                                int64_t episodes, uint64_t seed) {
  if (episodes < 1) {
    return absl::InvalidArgumentError(StrCat("evaluation needs >= 1 episode, got ", episodes));
  }
  if (weights == nullptr) return absl::InvalidArgumentError("evaluation needs weights");
  const absl::Time start = absl::Now();
  const int64_t version = weights->version;

  absl::Mutex mu;
  std::vector<float> rewards;
  rewards.reserve(static_cast<size_t>(episodes));
  EnvExecutor executor(EnvExecutor::OptionsFor(config.env));
  // One rollout per task: an evaluation wants many distinct tasks, not groups.
  TaskSource tasks(factory.task_name(), MixSeed(seed), /*group_size=*/1);
  ASSIGN_OR_RETURN(std::unique_ptr<RolloutEngine> engine,
                   RolloutEngine::Create(config.actor.engine, std::move(weights)));
  {
    Actor actor(
        "eval", config.actor, config.sampling, std::move(engine), &factory, &executor,
        text.tokenizer.get(), &tasks,
        [&](Trajectory t) {
          absl::MutexLock lock(&mu);
          rewards.push_back(t.final_reward);
          return absl::OkStatus();
        },
        MixSeed(seed + 1), text.turn_format.get());
    const absl::Status run = actor.Run(episodes);
    executor.Close();
    RETURN_IF_ERROR(run);
  }

  absl::MutexLock lock(&mu);
  PolicyEvalResult result = SummarizeEvalRewards(rewards, config.run.success_reward);
  result.version = version;
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return result;
}

}  // namespace flywheel
