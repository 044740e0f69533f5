#include "flywheel/env/latency/latency_model.h"

#include <cmath>
#include <fstream>
#include <algorithm>
#include <random>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/env/tasks/text.h"

namespace flywheel {
namespace {

absl::Duration Millis(double ms) { return absl::Microseconds(std::llround(ms * 1000.0)); }

class ConstantLatency : public LatencyModel {
 public:
  explicit ConstantLatency(absl::Duration d) : d_(d) {}
  absl::Duration Sample() override { return d_; }

 private:
  const absl::Duration d_;
};

// E[X] = exp(mu + sigma²/2), so mu = log(mean) - sigma²/2.
class LognormalLatency : public LatencyModel {
 public:
  LognormalLatency(double mean_ms, double sigma, uint64_t seed)
      : rng_(seed), dist_(std::log(mean_ms) - sigma * sigma / 2, sigma) {}
  absl::Duration Sample() override { return Millis(dist_(rng_)); }

 private:
  std::mt19937_64 rng_;
  std::lognormal_distribution<double> dist_;
};

// Inverse-CDF sampling: X = t_min · U^(-1/alpha); E[X] = alpha·t_min/(alpha-1).
class ParetoLatency : public LatencyModel {
 public:
  ParetoLatency(double mean_ms, double alpha, uint64_t seed)
      : rng_(seed), alpha_(alpha), t_min_ms_(mean_ms * (alpha - 1) / alpha) {}
  absl::Duration Sample() override {
    // 1 - U is in (0, 1], so the power is finite.
    const double u = 1.0 - std::uniform_real_distribution<double>(0, 1)(rng_);
    return Millis(t_min_ms_ * std::pow(u, -1.0 / alpha_));
  }

 private:
  std::mt19937_64 rng_;
  const double alpha_;
  const double t_min_ms_;
};

// Replays the trace in order from a seeded starting point, wrapping around, so concurrent
// episodes do not all see the same latency at the same step.
class TraceLatency : public LatencyModel {
 public:
  TraceLatency(std::shared_ptr<const std::vector<absl::Duration>> trace, uint64_t seed)
      : trace_(std::move(trace)), next_(seed % trace_->size()) {}
  absl::Duration Sample() override {
    const absl::Duration d = (*trace_)[next_];
    next_ = (next_ + 1) % trace_->size();
    return d;
  }

 private:
  std::shared_ptr<const std::vector<absl::Duration>> trace_;
  size_t next_;
};

}  // namespace

absl::StatusOr<std::vector<absl::Duration>> ReadLatencyTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("latency trace ", path, ": cannot open"));
  std::vector<absl::Duration> trace;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::string_view text = Trim(line);
    if (text.empty() || text[0] == '#') continue;
    char* end = nullptr;
    const std::string copy(text);
    const double ms = std::strtod(copy.c_str(), &end);
    if (end != copy.c_str() + copy.size() || !std::isfinite(ms) || ms < 0) {
      return absl::InvalidArgumentError(StrCat("latency trace ", path, ":", number, ": \"", text,
                                               "\" is not a latency in ms (a number >= 0)"));
    }
    trace.push_back(Millis(ms));
  }
  if (trace.empty()) {
    return absl::InvalidArgumentError(StrCat("latency trace ", path, " has no latencies"));
  }
  return trace;
}

namespace {

// A steady model's draws times the factory's phase factor at the time of the draw.
class PhasedLatency : public LatencyModel {
 public:
  PhasedLatency(std::unique_ptr<LatencyModel> steady, const LatencyModelFactory* factory,
                Clock* clock)
      : steady_(std::move(steady)), factory_(factory), clock_(clock) {}
  absl::Duration Sample() override {
    return steady_->Sample() * factory_->PhaseScale(clock_->Now());
  }

 private:
  std::unique_ptr<LatencyModel> steady_;
  const LatencyModelFactory* const factory_;  // outlives its models
  Clock* const clock_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<const LatencyModelFactory>> LatencyModelFactory::Create(
    const LatencyOptions& options, Clock* clock) {
  std::shared_ptr<LatencyModelFactory> factory(new LatencyModelFactory(options, clock));
  if (options.model == LatencyKind::kTrace) {
    ASSIGN_OR_RETURN(std::vector<absl::Duration> trace, ReadLatencyTrace(options.trace_file));
    factory->trace_ = std::make_shared<const std::vector<absl::Duration>>(std::move(trace));
  }
  return factory;
}

double LatencyModelFactory::PhaseScale(absl::Time now) const {
  if (options_.phase_seconds <= 0 || options_.phase_scales.empty()) return 1;
  const double t = std::max(0.0, absl::ToDoubleSeconds(now - start_));
  const auto phase = static_cast<size_t>(t / options_.phase_seconds);
  return options_.phase_scales[phase % options_.phase_scales.size()];
}

std::unique_ptr<LatencyModel> LatencyModelFactory::NewModel(uint64_t seed) const {
  std::unique_ptr<LatencyModel> steady = NewSteadyModel(seed);
  if (options_.phase_seconds <= 0) return steady;
  return std::make_unique<PhasedLatency>(std::move(steady), this, clock_);
}

std::unique_ptr<LatencyModel> LatencyModelFactory::NewSteadyModel(uint64_t seed) const {
  switch (options_.model) {
    case LatencyKind::kNone:
      return std::make_unique<ConstantLatency>(absl::ZeroDuration());
    case LatencyKind::kConstant:
      return std::make_unique<ConstantLatency>(Millis(options_.mean_ms));
    case LatencyKind::kLognormal:
      if (options_.mean_ms <= 0) return std::make_unique<ConstantLatency>(absl::ZeroDuration());
      return std::make_unique<LognormalLatency>(options_.mean_ms, options_.sigma, seed);
    case LatencyKind::kPareto:
      if (options_.mean_ms <= 0) return std::make_unique<ConstantLatency>(absl::ZeroDuration());
      return std::make_unique<ParetoLatency>(options_.mean_ms, options_.alpha, seed);
    case LatencyKind::kTrace:
      return std::make_unique<TraceLatency>(trace_, seed);
  }
  return std::make_unique<ConstantLatency>(absl::ZeroDuration());
}

std::string LatencyModelFactory::DebugString() const {
  switch (options_.model) {
    case LatencyKind::kNone:
      return "none";
    case LatencyKind::kConstant:
      return StrCat("constant(", options_.mean_ms, "ms)");
    case LatencyKind::kLognormal:
      return StrCat("lognormal(mean=", options_.mean_ms, "ms, sigma=", options_.sigma, ")");
    case LatencyKind::kPareto:
      return StrCat("pareto(mean=", options_.mean_ms, "ms, alpha=", options_.alpha, ")");
    case LatencyKind::kTrace:
      return StrCat("trace(", options_.trace_file, ", ", trace_->size(), " entries)");
  }
  return "?";
}

}  // namespace flywheel
