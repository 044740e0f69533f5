#include "flywheel/core/metrics.h"

#include <algorithm>

namespace flywheel {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  const size_t bucket =
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++counts_[bucket];
  ++count_;
  sum_ += value;
}

int64_t Histogram::count() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

double Histogram::sum() const {
  absl::MutexLock lock(&mu_);
  return sum_;
}

double Histogram::Quantile(double q) const {
  absl::MutexLock lock(&mu_);
  if (count_ == 0) return 0.0;
  const double target = q * static_cast<double>(count_);
  double seen = 0;
  for (size_t b = 0; b < counts_.size(); ++b) {
    if (counts_[b] == 0) continue;
    if (seen + counts_[b] >= target) {
      if (b == bounds_.size()) return bounds_.empty() ? 0.0 : bounds_.back();
      const double lo = b == 0 ? std::min(0.0, bounds_[0]) : bounds_[b - 1];
      const double fraction = (target - seen) / static_cast<double>(counts_[b]);
      return lo + fraction * (bounds_[b] - lo);
    }
    seen += counts_[b];
  }
  return bounds_.empty() ? 0.0 : bounds_.back();
}

nlohmann::json Histogram::ToJson() const {
  absl::MutexLock lock(&mu_);
  nlohmann::json buckets = nlohmann::json::array();
  for (size_t b = 0; b < counts_.size(); ++b) {
    if (counts_[b] == 0) continue;
    buckets.push_back({{"le", b < bounds_.size() ? nlohmann::json(bounds_[b]) : "+inf"},
                       {"count", counts_[b]}});
  }
  return {{"count", count_}, {"sum", sum_}, {"buckets", buckets}};
}

MetricsRegistry& MetricsRegistry::Global() {
  static MetricsRegistry* registry = new MetricsRegistry;
  return *registry;
}

Counter* MetricsRegistry::GetCounter(std::string_view name) {
  absl::MutexLock lock(&mu_);
  auto it = counters_.find(name);
  if (it == counters_.end()) {
    it = counters_.emplace(std::string(name), std::make_unique<Counter>()).first;
  }
  return it->second.get();
}

Gauge* MetricsRegistry::GetGauge(std::string_view name) {
  absl::MutexLock lock(&mu_);
  auto it = gauges_.find(name);
  if (it == gauges_.end()) it = gauges_.emplace(std::string(name), std::make_unique<Gauge>()).first;
  return it->second.get();
}

Histogram* MetricsRegistry::GetHistogram(std::string_view name,
                                         const std::vector<double>& bounds) {
  absl::MutexLock lock(&mu_);
  auto it = histograms_.find(name);
  if (it == histograms_.end()) {
    it = histograms_.emplace(std::string(name), std::make_unique<Histogram>(bounds)).first;
  }
  return it->second.get();
}

nlohmann::json MetricsRegistry::Snapshot() const {
  absl::MutexLock lock(&mu_);
  nlohmann::json out = {{"counters", nlohmann::json::object()},
                        {"gauges", nlohmann::json::object()},
                        {"histograms", nlohmann::json::object()}};
  for (const auto& [name, c] : counters_) out["counters"][name] = c->value();
  for (const auto& [name, g] : gauges_) out["gauges"][name] = g->value();
  for (const auto& [name, h] : histograms_) out["histograms"][name] = h->ToJson();
  return out;
}

}  // namespace flywheel
