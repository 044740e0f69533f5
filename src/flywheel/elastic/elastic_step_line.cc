#include "flywheel/elastic/elastic_step_line.h"

namespace flywheel {

void StepData::Add(const Trajectory& t, double success_reward) {
  ++trajectories;
  reward_sum += t.final_reward;
  successes += t.final_reward >= success_reward;
}

MeteredStep MeteredStepOf(const StreamingStepResult& r, const StepReport& report) {
  return {.compute_seconds = r.times.compute(),
          .cell_micro_steps = r.cell_micro_steps,
          .micro_steps = r.micro_steps,
          .episodes = report.kept,
          .tokens = report.trainable_tokens};
}

nlohmann::json ElasticStepLine(const StreamingStepResult& r, int64_t version, double elapsed_s,
                               double step_seconds, const StepData& data,
                               const StepReport& report) {
  const LagSummary lags = SummariseLags(report.lag_counts);
  return {
      {"step", r.optimizer.step},
      {"version", version},
      {"elapsed_s", elapsed_s},
      {"reward_mean", data.reward()},
      {"success_rate", data.success()},
      {"trajectories", data.trajectories},
      {"dropped",
       {{"learner_stale", report.dropped_stale}, {"learner_too_long", report.dropped_too_long}}},
      {"loss", r.loss},
      {"lr", r.optimizer.lr},
      {"grad_norm", r.optimizer.grad_norm},
      {"mean_ratio", r.diagnostics.mean_ratio()},
      {"clip_fraction", r.diagnostics.clip_fraction()},
      {"trainable_tokens", r.diagnostics.tokens},
      {"learner_busy_s", r.times.compute()},
      {"learner_wait_s", step_seconds - r.times.compute()},
      {"participants", r.participants},
      {"micro_steps", r.micro_steps},
      {"core_micro_steps", r.cell_micro_steps},
      {"lag_mean", lags.mean},
      {"lag_max", lags.max},
      {"lag_counts", LagCountsJson(report.lag_counts)},
  };
}

}  // namespace flywheel
