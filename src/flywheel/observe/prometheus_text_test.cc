#include "flywheel/observe/prometheus_text.h"

#include <gtest/gtest.h>

namespace flywheel {
namespace {

TEST(PrometheusTextTest, CountersGaugesAndLabelsFollowTheNamingConventions) {
  MetricsRegistry registry;
  registry.GetCounter("buffer.dropped{reason=stale}", "trajectories dropped, by reason")
      ->Increment(3);
  registry.GetCounter("buffer.dropped{reason=evicted}")->Increment(1);
  registry.GetCounter("actor.episodes")->Increment(5);
  registry.GetGauge("buffer.size", "trajectories held")->Set(2.5);
  EXPECT_EQ(PrometheusText(registry.View()),
            "# HELP flywheel_actor_episodes_total actor.episodes\n"
            "# TYPE flywheel_actor_episodes_total counter\n"
            "flywheel_actor_episodes_total 5\n"
            "# HELP flywheel_buffer_dropped_total trajectories dropped, by reason\n"
            "# TYPE flywheel_buffer_dropped_total counter\n"
            "flywheel_buffer_dropped_total{reason=\"evicted\"} 1\n"
            "flywheel_buffer_dropped_total{reason=\"stale\"} 3\n"
            "# HELP flywheel_buffer_size trajectories held\n"
            "# TYPE flywheel_buffer_size gauge\n"
            "flywheel_buffer_size 2.5\n");
}

TEST(PrometheusTextTest, HistogramsAreCumulativeWithSumAndCount) {
  MetricsRegistry registry;
  Histogram* h = registry.GetHistogram("env.step_seconds{kind=copy}", {0.01, 0.1}, "env steps");
  h->Observe(0.005);
  h->Observe(0.05);
  h->Observe(0.05);
  h->Observe(3);
  EXPECT_EQ(PrometheusText(registry.View()),
            "# HELP flywheel_env_step_seconds env steps\n"
            "# TYPE flywheel_env_step_seconds histogram\n"
            "flywheel_env_step_seconds_bucket{kind=\"copy\",le=\"0.01\"} 1\n"
            "flywheel_env_step_seconds_bucket{kind=\"copy\",le=\"0.1\"} 3\n"
            "flywheel_env_step_seconds_bucket{kind=\"copy\",le=\"+Inf\"} 4\n"
            "flywheel_env_step_seconds_sum{kind=\"copy\"} 3.105\n"
            "flywheel_env_step_seconds_count{kind=\"copy\"} 4\n");
}

TEST(PrometheusTextTest, OddCharactersAreMadeLegal) {
  MetricsRegistry registry;
  registry.GetGauge("cell.role{cell=1,name=vm:12 \"a\"}", "a\nb\\c")->Set(1);
  registry.GetCounter("weights.swaps_total")->Increment();
  EXPECT_EQ(PrometheusText(registry.View()),
            "# HELP flywheel_cell_role a\\nb\\\\c\n"
            "# TYPE flywheel_cell_role gauge\n"
            "flywheel_cell_role{cell=\"1\",name=\"vm:12 \\\"a\\\"\"} 1\n"
            "# HELP flywheel_weights_swaps_total weights.swaps_total\n"
            "# TYPE flywheel_weights_swaps_total counter\n"
            "flywheel_weights_swaps_total 1\n");
}

}  // namespace
}  // namespace flywheel
