#include "flywheel/core/metrics.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>

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
