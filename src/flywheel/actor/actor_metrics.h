// The rollout side's metrics in the process-wide registry (core/metrics.h), looked up once: what
// Prometheus scrapes from `flywheel actor`, `flywheel cell` and `flywheel train`. Shared by every
// actor and engine of the process; recording is a few relaxed atomics.
#ifndef FLYWHEEL_ACTOR_ACTOR_METRICS_H_
#define FLYWHEEL_ACTOR_ACTOR_METRICS_H_

#include <array>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "flywheel/core/metrics.h"
#include "flywheel/core/trajectory.h"

namespace flywheel {

struct ActorMetrics {
  std::array<Counter*, 5> episodes;  // finished, by Termination
  Gauge* episodes_in_flight;
  Counter* generated_tokens;
  Histogram* episode_seconds;   // start to finish, every termination
  Histogram* env_step_seconds;  // one environment call (reset or step), sent to reply
  Counter* weight_swaps;
  Histogram* weight_swap_seconds;  // installing a newer snapshot in a rollout engine

  static const ActorMetrics& Get();

  void EpisodeEnded(Termination termination, absl::Duration duration) const;

  // The environment-call latency a run measured, for its summary.json: the growth of
  // env_step_seconds since `at_start` (its BucketCounts() when the run began), as
  // {"bounds_s": [...], "counts": [...], "count": n}. The registry is process-wide: runs that
  // overlap in one process would see each other's calls.
  nlohmann::json EnvStepSecondsSince(const std::vector<int64_t>& at_start) const;
};

}  // namespace flywheel

#endif  // FLYWHEEL_ACTOR_ACTOR_METRICS_H_
