#include "flywheel/core/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "flywheel/core/clock.h"

namespace flywheel {
namespace {

TEST(MetricsTest, CountersAreSharedByName) {
  MetricsRegistry registry;
  Counter* a = registry.GetCounter("buffer.dropped{reason=stale}");
  EXPECT_EQ(a, registry.GetCounter("buffer.dropped{reason=stale}"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([a] {
      for (int j = 0; j < 1000; ++j) a->Increment();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(registry.Snapshot()["counters"]["buffer.dropped{reason=stale}"], 4000);
}

TEST(MetricsTest, HistogramQuantiles) {
  Histogram h({1, 2, 4, 8});
  for (int i = 0; i < 90; ++i) h.Observe(0.5);
  for (int i = 0; i < 10; ++i) h.Observe(6);
  EXPECT_EQ(h.count(), 100);
  EXPECT_DOUBLE_EQ(h.sum(), 90 * 0.5 + 60);
  EXPECT_LE(h.Quantile(0.5), 1.0);
  EXPECT_GT(h.Quantile(0.95), 4.0);
  EXPECT_LE(h.Quantile(0.95), 8.0);
}

TEST(MetricsTest, ConcurrentObservationsAreAllCounted) {
  Histogram h({1, 2});
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&h, i] {
      for (int j = 0; j < 1000; ++j) h.Observe(i % 3);  // 0, 1, 2, 0: buckets <=1, <=1, <=2
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.count(), 4000);
  EXPECT_DOUBLE_EQ(h.sum(), 1000.0 * (0 + 1 + 2 + 0));
  EXPECT_EQ(h.BucketCounts(), (std::vector<int64_t>{3000, 1000, 0}));
}

TEST(MetricsTest, TheViewCopiesEveryValueAndTheFirstHelpOfAFamily) {
  MetricsRegistry registry;
  registry.GetCounter("buffer.dropped{reason=stale}")->Increment(3);
  registry.GetCounter("buffer.dropped{reason=evicted}", "trajectories dropped, by reason");
  registry.GetCounter("buffer.dropped{reason=invalid}", "another text");
  registry.GetGauge("buffer.size", "trajectories held")->Set(7);
  registry.GetHistogram("learner.lag", {0, 1}, "versions behind")->Observe(1);
  const MetricsView view = registry.View();
  EXPECT_EQ(view.counters.at("buffer.dropped{reason=stale}"), 3);
  EXPECT_EQ(view.counters.at("buffer.dropped{reason=evicted}"), 0);
  EXPECT_EQ(view.gauges.at("buffer.size"), 7);
  EXPECT_EQ(view.histograms.at("learner.lag").counts, (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(view.histograms.at("learner.lag").bounds, (std::vector<double>{0, 1}));
  EXPECT_EQ(view.help.at("buffer.dropped"), "trajectories dropped, by reason");
  EXPECT_EQ(view.help.at("buffer.size"), "trajectories held");
  EXPECT_EQ(MetricFamily("a.b{x=y}"), "a.b");
  EXPECT_EQ(MetricFamily("a.b"), "a.b");
}

TEST(ClockTest, VirtualClockMovesOnlyWhenTold) {
  VirtualClock clock;
  const absl::Time start = clock.Now();
  clock.SleepFor(absl::Hours(3));
  EXPECT_EQ(clock.Now() - start, absl::Hours(3));
  clock.SleepFor(-absl::Seconds(1));
  EXPECT_EQ(clock.Now() - start, absl::Hours(3));
}

}  // namespace
}  // namespace flywheel
