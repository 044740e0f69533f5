#include "flywheel/runtime/elastic_step_line.h"

#include <algorithm>

namespace flywheel {

void StepData::Add(const Trajectory& t, double success_reward) {
  ++trajectories;
  reward_sum += t.final_reward;
  successes += t.final_reward >= success_reward;
}

nlohmann::json ElasticStepLine(const StreamingStepResult& r, int64_t version, double elapsed_s,
                               double step_seconds, const StepData& data,
                               const StepReport& report) {
  double lag_sum = 0;
  int64_t lag_n = 0, lag_max = 0;
  for (const auto& [lag, count] : report.lag_counts) {
    lag_sum += static_cast<double>(lag * count);
    lag_n += count;
    lag_max = std::max(lag_max, lag);
  }
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
      {"lag_mean", lag_n > 0 ? lag_sum / static_cast<double>(lag_n) : 0.0},
      {"lag_max", lag_max},
      {"lag_counts", LagCountsJson(report.lag_counts)},
  };
}

}  // namespace flywheel
