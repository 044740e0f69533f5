// Latency models: how long an environment step takes, drawn per step.
//
//   constant   every step takes mean_ms
//   lognormal  log(latency) ~ N(mu, sigma²), mu chosen so that the mean is mean_ms
//   pareto     P(latency > t) = (t_min / t)^alpha for t >= t_min, t_min chosen so that the mean
//              is mean_ms — the heavy tail of real tool calls and code execution
//   trace      latencies recorded from a real environment, replayed in order
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
  static absl::StatusOr<std::shared_ptr<const LatencyModelFactory>> Create(
      const LatencyOptions& options);

  // A model for one episode, drawing from its own generator seeded with `seed`.
  std::unique_ptr<LatencyModel> NewModel(uint64_t seed) const;

  bool enabled() const { return options_.model != LatencyKind::kNone; }
  std::string DebugString() const;

 private:
  explicit LatencyModelFactory(const LatencyOptions& options) : options_(options) {}

  const LatencyOptions options_;
  std::shared_ptr<const std::vector<absl::Duration>> trace_;
};

// Reads a trace: one latency in milliseconds per line; blank lines and '#' comments skipped.
absl::StatusOr<std::vector<absl::Duration>> ReadLatencyTrace(const std::string& path);

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_LATENCY_LATENCY_MODEL_H_
