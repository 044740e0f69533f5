#include "flywheel/core/metrics.h"

#include <algorithm>
#include <numeric>

namespace flywheel {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(std::make_unique<std::atomic<int64_t>[]>(bounds_.size() + 1)) {}

void Histogram::Observe(double value) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

std::vector<int64_t> Histogram::BucketCounts() const {
  std::vector<int64_t> counts(bounds_.size() + 1);
  for (size_t b = 0; b < counts.size(); ++b) counts[b] = counts_[b].load(std::memory_order_relaxed);
  return counts;
}

int64_t Histogram::count() const {
  const std::vector<int64_t> counts = BucketCounts();
  return std::accumulate(counts.begin(), counts.end(), int64_t{0});
}

double Histogram::sum() const { return sum_.load(std::memory_order_relaxed); }

double Histogram::Quantile(double q) const {
  const std::vector<int64_t> counts = BucketCounts();
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  if (total == 0) return 0.0;
  const double target = q * static_cast<double>(total);
  double seen = 0;
  for (size_t b = 0; b < counts.size(); ++b) {
    if (counts[b] == 0) continue;
    if (seen + counts[b] >= target) {
      if (b == bounds_.size()) return bounds_.empty() ? 0.0 : bounds_.back();
      const double lo = b == 0 ? std::min(0.0, bounds_[0]) : bounds_[b - 1];
      const double fraction = (target - seen) / static_cast<double>(counts[b]);
      return lo + fraction * (bounds_[b] - lo);
    }
    seen += counts[b];
  }
  return bounds_.empty() ? 0.0 : bounds_.back();
}

nlohmann::json Histogram::ToJson() const {
  const std::vector<int64_t> counts = BucketCounts();
  nlohmann::json buckets = nlohmann::json::array();
  int64_t total = 0;
  for (size_t b = 0; b < counts.size(); ++b) {
    total += counts[b];
    if (counts[b] == 0) continue;
    buckets.push_back(
        {{"le", b < bounds_.size() ? nlohmann::json(bounds_[b]) : "+inf"}, {"count", counts[b]}});
  }
  return {{"count", total}, {"sum", sum()}, {"buckets", buckets}};
}

const std::vector<double>& SecondsBounds() {
  static const std::vector<double> bounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                             0.1,   0.25,   0.5,   1,    2.5,   5,
                                             10,    30,     60,    300,  900,   3600};
  return bounds;
}

std::string_view MetricFamily(std::string_view name) {
  return name.substr(0, std::min(name.size(), name.find('{')));
}

MetricsRegistry& MetricsRegistry::Global() {
  static MetricsRegistry* registry = new MetricsRegistry;
  return *registry;
}

void MetricsRegistry::DescribeLocked(std::string_view name, std::string_view help) {
  if (help.empty()) return;
  auto [it, inserted] = help_.try_emplace(std::string(MetricFamily(name)), help);
  if (!inserted && it->second.empty()) it->second = std::string(help);
}

Counter* MetricsRegistry::GetCounter(std::string_view name, std::string_view help) {
  absl::MutexLock lock(&mu_);
  DescribeLocked(name, help);
  auto it = counters_.find(name);
  if (it == counters_.end()) {
    it = counters_.emplace(std::string(name), std::make_unique<Counter>()).first;
  }
  return it->second.get();
}

Gauge* MetricsRegistry::GetGauge(std::string_view name, std::string_view help) {
  absl::MutexLock lock(&mu_);
  DescribeLocked(name, help);
  auto it = gauges_.find(name);
  if (it == gauges_.end()) it = gauges_.emplace(std::string(name), std::make_unique<Gauge>()).first;
  return it->second.get();
}

Histogram* MetricsRegistry::GetHistogram(std::string_view name, const std::vector<double>& bounds,
                                         std::string_view help) {
  absl::MutexLock lock(&mu_);
  DescribeLocked(name, help);
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

MetricsView MetricsRegistry::View() const {
  absl::MutexLock lock(&mu_);
  MetricsView view;
  for (const auto& [name, c] : counters_) view.counters[name] = c->value();
  for (const auto& [name, g] : gauges_) view.gauges[name] = g->value();
  for (const auto& [name, h] : histograms_) {
    MetricsView::HistogramValues& values = view.histograms[name];
    values.bounds = h->bounds();
    values.counts = h->BucketCounts();
    values.sum = h->sum();
  }
  view.help.insert(help_.begin(), help_.end());
  return view;
}

}  // namespace flywheel
