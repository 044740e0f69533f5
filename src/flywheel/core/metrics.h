// A process-wide registry of named counters, gauges and histograms.
//
// Components look their metrics up once and keep the pointer; updates are relaxed atomics, so
// recording takes no lock on the hot path (the registry's own lock is taken only to create or
// read metrics). Names are dotted with optional labels in braces, e.g.
// "buffer.dropped{reason=stale}"; the part before the braces is the metric's family, which may
// carry a help text (the first non-empty one given wins). Units go in the name (`_seconds`,
// `_bytes`, `_tokens`), as Prometheus asks; counters are named without `_total`, which the
// Prometheus exposition adds (observe/prometheus_text.h). Snapshot() gives JSON; View() a copy
// of every value for exporters.
#ifndef FLYWHEEL_CORE_METRICS_H_
#define FLYWHEEL_CORE_METRICS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace flywheel {

class Counter {
 public:
  void Increment(int64_t by = 1) { value_.fetch_add(by, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double by) { value_.fetch_add(by, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Fixed upper bounds; one overflow bucket past the last bound.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  int64_t count() const;
  double sum() const;
  // Linear interpolation within the bucket holding quantile q in [0, 1].
  double Quantile(double q) const;
  nlohmann::json ToJson() const;

  const std::vector<double>& bounds() const { return bounds_; }
  // Observations per bucket (bounds().size() + 1 of them, the overflow last). Each bucket is
  // read atomically, the set of them is not: a concurrent Observe may be seen in some only.
  std::vector<int64_t> BucketCounts() const;

 private:
  const std::vector<double> bounds_;
  const std::unique_ptr<std::atomic<int64_t>[]> counts_;
  std::atomic<double> sum_{0.0};
};

// A copy of every metric's value at one moment, for exporters.
struct MetricsView {
  struct HistogramValues {
    std::vector<double> bounds;
    std::vector<int64_t> counts;  // per bucket, the overflow last
    double sum = 0;
  };
  std::map<std::string, int64_t> counters;
  std::map<std::string, double> gauges;
  std::map<std::string, HistogramValues> histograms;
  std::map<std::string, std::string> help;  // by family ("buffer.dropped")
};

class MetricsRegistry {
 public:
  // The process-wide registry.
  static MetricsRegistry& Global();

  // Returns the metric with this name, creating it on first use. Pointers stay valid for the
  // registry's lifetime. A histogram keeps the bounds of its first creation. `help` describes
  // the family (the name without its labels).
  Counter* GetCounter(std::string_view name, std::string_view help = {});
  Gauge* GetGauge(std::string_view name, std::string_view help = {});
  Histogram* GetHistogram(std::string_view name, const std::vector<double>& bounds,
                          std::string_view help = {});

  nlohmann::json Snapshot() const;
  MetricsView View() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Counter>, std::less<>> counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Gauge>, std::less<>> gauges_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Histogram>, std::less<>> histograms_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string, std::less<>> help_ ABSL_GUARDED_BY(mu_);

  void DescribeLocked(std::string_view name, std::string_view help)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

// Histogram bounds for durations in seconds, from a millisecond tool call to an hours-long
// episode.
const std::vector<double>& SecondsBounds();

// The family of a metric name: "buffer.dropped{reason=stale}" -> "buffer.dropped".
std::string_view MetricFamily(std::string_view name);

}  // namespace flywheel

#endif  // FLYWHEEL_CORE_METRICS_H_
