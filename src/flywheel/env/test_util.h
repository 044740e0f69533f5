// Helpers shared by the environment tests.
#ifndef FLYWHEEL_ENV_TEST_UTIL_H_
#define FLYWHEEL_ENV_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "flywheel/env/env_options.h"
#include "flywheel/env/interface.h"
#include "flywheel/env/policy.h"
#include "flywheel/env/task_source.h"

namespace flywheel::testing {

// Mean total reward of `episodes` episodes of `policy` on `env`.
inline double MeanReward(Environment& env, Policy& policy, int episodes, int64_t max_steps,
                         uint64_t seed = 7) {
  TaskSource tasks("test", seed, 1);
  double total = 0;
  for (int i = 0; i < episodes; ++i) {
    auto summary = RunEpisode(env, policy, tasks.Next(), max_steps);
    EXPECT_TRUE(summary.ok()) << summary.status();
    if (summary.ok()) total += summary->total_reward;
  }
  return total / episodes;
}

inline std::string SourcePath(const std::string& relative) {
  const char* source = std::getenv("FLYWHEEL_SOURCE_DIR");
  return std::string(source != nullptr ? source : ".") + "/" + relative;
}

inline LatencyOptions Latency(LatencyKind model, double mean_ms, double sigma = 1.0,
                              double alpha = 1.5, std::string trace_file = "") {
  LatencyOptions o;
  o.model = model;
  o.mean_ms = mean_ms;
  o.sigma = sigma;
  o.alpha = alpha;
  o.trace_file = std::move(trace_file);
  return o;
}

// An environment that never ends: every step's observation is "ok". For latency tests.
class EndlessEnv : public Environment {
 public:
  absl::StatusOr<StepResult> Reset(const TaskInstance&) override {
    StepResult r;
    r.observation = "start";
    return r;
  }
  absl::StatusOr<StepResult> Step(std::string_view action) override {
    StepResult r;
    r.observation = "ok";
    if (action == "tool") r.tool = "calc";
    return r;
  }
  absl::StatusOr<double> ScorePartial() override { return 0.0; }
  const VocabularySpec& vocabulary() const override { return vocabulary_; }
  std::string DebugString() const override { return "endless"; }

 private:
  VocabularySpec vocabulary_;
};

}  // namespace flywheel::testing

#endif  // FLYWHEEL_ENV_TEST_UTIL_H_
