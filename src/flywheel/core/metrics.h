// A process-wide registry of named counters, gauges and histograms.
//
// Components look their metrics up once and keep the pointer; updates are lock-free atomics
// (histograms take a short lock). Names are dotted with optional labels in braces, e.g.
// "buffer.dropped{reason=stale}". Snapshot() gives JSON for metrics.jsonl and the HTTP endpoint.
#ifndef FLYWHEEL_CORE_METRICS_H_
#define FLYWHEEL_CORE_METRICS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include <nlohmann/json.hpp>

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

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<int64_t> counts_ ABSL_GUARDED_BY(mu_);
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
};

class MetricsRegistry {
 public:
  // The process-wide registry.
  static MetricsRegistry& Global();

  // Returns the metric with this name, creating it on first use. Pointers stay valid for the
  // registry's lifetime. A histogram keeps the bounds of its first creation.
  Counter* GetCounter(std::string_view name);
  Gauge* GetGauge(std::string_view name);
  Histogram* GetHistogram(std::string_view name, const std::vector<double>& bounds);

  nlohmann::json Snapshot() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Counter>, std::less<>> counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Gauge>, std::less<>> gauges_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Histogram>, std::less<>> histograms_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel

#endif  // FLYWHEEL_CORE_METRICS_H_
