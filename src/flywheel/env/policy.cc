#include "flywheel/env/policy.h"

#include "flywheel/core/status_macros.h"

namespace flywheel {

absl::StatusOr<EpisodeSummary> RunEpisode(Environment& env, Policy& policy,
                                          const TaskInstance& task, int64_t max_steps) {
  EpisodeSummary summary;
  ASSIGN_OR_RETURN(StepResult first, env.Reset(task));
  policy.Begin(task, first.observation);
  std::string observation = first.observation;
  while (summary.steps < max_steps) {
    ASSIGN_OR_RETURN(StepResult r, env.Step(policy.Act(observation)));
    ++summary.steps;
    summary.total_reward += r.reward;
    if (r.partial_score) summary.partial_score = r.partial_score;
    if (r.done) {
      summary.end = r.end == EpisodeEnd::kRunning ? EpisodeEnd::kDone : r.end;
      env.Close();
      return summary;
    }
    observation = std::move(r.observation);
  }
  ASSIGN_OR_RETURN(double score, env.ScorePartial());
  summary.partial_score = score;
  summary.end = EpisodeEnd::kTimeout;
  env.Close();
  return summary;
}

}  // namespace flywheel
