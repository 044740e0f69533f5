// Latency models: how long an environment step takes, drawn per step.
//
//   constant   every step takes mean_ms
//   lognormal  log(latency) ~ N(mu, sigma²), mu chosen so that the mean is mean_ms
//   pareto     P(latency > t) = (t_min / t)^alpha for t >= t_min, t_min chosen so that the mean
//              is mean_ms — the heavy tail of real tool calls and code execution
//   trace      latencies recorded from a real environment, replayed in order
//
// With phase_seconds > 0 every draw is multiplied by the current phase's factor (phase_scales,
// cycled), the phase read from the factory's clock: a load whose demand moves over time.
//
// A LatencyModelFactory is built once from options (it reads the trace file) and shared;
// each episode draws from its own seeded LatencyModel, which is not thread-safe.
#ifndef FLYWHEEL_ENV_LATENCY_LATENCY_MODEL_H_
#define FLYWHEEL_ENV_LATENCY_LATENCY_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/core/clock.h"
#include "flywheel/env/env_options.h"

namespace flywheel {

class LatencyModel {
 public:
  virtual ~LatencyModel() = default;
  virtual absl::Duration Sample() = 0;
};

class LatencyModelFactory {
 public:
  // Reads the trace file for model = "trace"; the error names the file and line.
  // Phases are timed on `clock` from now (borrowed, must outlive the factory and its models).
  static absl::StatusOr<std::shared_ptr<const LatencyModelFactory>> Create(
      const LatencyOptions& options, Clock* clock = RealClock());

  // A model for one episode, drawing from its own generator seeded with `seed`.
  std::unique_ptr<LatencyModel> NewModel(uint64_t seed) const;

  bool enabled() const { return options_.model != LatencyKind::kNone; }
  // The factor latencies drawn at `now` are multiplied by (1 without phases).
  double PhaseScale(absl::Time now) const;
  std::string DebugString() const;

 private:
  LatencyModelFactory(const LatencyOptions& options, Clock* clock)
      : options_(options), clock_(clock), start_(clock->Now()) {}
  std::unique_ptr<LatencyModel> NewSteadyModel(uint64_t seed) const;

  const LatencyOptions options_;
  Clock* const clock_;  // borrowed
  const absl::Time start_;
  std::shared_ptr<const std::vector<absl::Duration>> trace_;
};

// Reads a trace: one latency in milliseconds per line; blank lines and '#' comments skipped.
absl::StatusOr<std::vector<absl::Duration>> ReadLatencyTrace(const std::string& path);

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_LATENCY_LATENCY_MODEL_H_
