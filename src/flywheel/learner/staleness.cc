#include "flywheel/learner/staleness.h"

#include <algorithm>
#include <string>
#include <utility>

namespace flywheel {

StalenessFilter::StalenessFilter(int64_t max_staleness)
    : max_staleness_(max_staleness),
      global_lags_(MetricsRegistry::Global().GetHistogram(
          "learner.lag", LagBounds(), "policy versions between a trajectory and the learner")),
      dropped_(MetricsRegistry::Global().GetCounter(
          "learner.dropped{reason=stale}", "trajectories the learner dropped, by reason")) {}

const std::vector<double>& StalenessFilter::LagBounds() {
  static const std::vector<double> bounds = {0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64};
  return bounds;
}

int64_t StalenessFilter::Lag(const Trajectory& t, int64_t learner_version) {
  const int64_t oldest = t.MinVersion();
  return oldest == kNoVersion ? 0 : learner_version - oldest;
}

StalenessReport StalenessFilter::Apply(int64_t learner_version,
                                       std::vector<Trajectory>& batch) const {
  StalenessReport report;
  report.lags = std::make_unique<Histogram>(LagBounds());
  std::vector<Trajectory> kept;
  kept.reserve(batch.size());
  for (Trajectory& t : batch) {
    const int64_t lag = Lag(t, learner_version);
    ++report.lag_counts[lag];
    report.lags->Observe(static_cast<double>(lag));
    global_lags_->Observe(static_cast<double>(lag));
    if (max_staleness_ >= 0 && lag > max_staleness_) {
      ++report.dropped;
      continue;
    }
    kept.push_back(std::move(t));
  }
  dropped_->Increment(report.dropped);
  report.kept = static_cast<int64_t>(kept.size());
  batch = std::move(kept);
  return report;
}

nlohmann::json LagCountsJson(const std::map<int64_t, int64_t>& lag_counts) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [lag, count] : lag_counts) out[std::to_string(lag)] = count;
  return out;
}

LagSummary SummariseLags(const std::map<int64_t, int64_t>& lag_counts) {
  LagSummary out;
  double sum = 0;
  int64_t n = 0;
  for (const auto& [lag, count] : lag_counts) {
    sum += static_cast<double>(lag * count);
    n += count;
    out.max = std::max(out.max, lag);
  }
  if (n > 0) out.mean = sum / static_cast<double>(n);
  return out;
}

}  // namespace flywheel
