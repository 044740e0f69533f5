#include "flywheel/learner/staleness.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace flywheel {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

Trajectory WithVersions(std::string id, std::vector<int64_t> versions) {
  Trajectory t;
  t.id = std::move(id);
  t.AppendPrompt(1);
  for (int64_t v : versions) t.AppendGenerated(2, -1.0f, v);
  return t;
}

TEST(StalenessTest, LagIsLearnerVersionMinusOldestToken) {
  // Weights swapped mid-episode: tokens from versions 7 and 9; the oldest decides.
  EXPECT_EQ(StalenessFilter::Lag(WithVersions("a", {7, 9, 9}), 10), 3);
  EXPECT_EQ(StalenessFilter::Lag(WithVersions("b", {10}), 10), 0);
  EXPECT_EQ(StalenessFilter::Lag(WithVersions("prompt-only", {}), 10), 0);
}

TEST(StalenessTest, DropsBeyondTheBoundCountsAndRecordsLags) {
  Counter* dropped = MetricsRegistry::Global().GetCounter("learner.dropped{reason=stale}");
  const int64_t before = dropped->value();
  std::vector<Trajectory> batch = {WithVersions("fresh", {10}), WithVersions("lag2", {8, 10}),
                                   WithVersions("lag3", {7}), WithVersions("lag5", {5, 9}),
                                   WithVersions("lag2b", {8})};
  StalenessFilter filter(/*max_staleness=*/2);
  const StalenessReport report = filter.Apply(10, batch);
  EXPECT_EQ(report.kept, 3);
  EXPECT_EQ(report.dropped, 2);
  std::vector<std::string> ids;
  for (const auto& t : batch) ids.push_back(t.id);
  EXPECT_THAT(ids, ElementsAre("fresh", "lag2", "lag2b"));  // order kept
  EXPECT_THAT(report.lag_counts, ElementsAre(Pair(0, 1), Pair(2, 2), Pair(3, 1), Pair(5, 1)));
  EXPECT_EQ(report.lags->count(), 5);
  EXPECT_EQ(report.lags->sum(), 12);
  EXPECT_EQ(dropped->value(), before + 2);
}

TEST(StalenessTest, ZeroIsOnPolicyAndMinusOneIsUnbounded) {
  std::vector<Trajectory> batch = {WithVersions("now", {4}), WithVersions("old", {3})};
  std::vector<Trajectory> copy = batch;
  EXPECT_EQ(StalenessFilter(0).Apply(4, batch).kept, 1);
  EXPECT_EQ(batch[0].id, "now");
  const StalenessReport all = StalenessFilter(-1).Apply(400, copy);
  EXPECT_EQ(all.kept, 2);
  EXPECT_EQ(all.dropped, 0);
}

}  // namespace
}  // namespace flywheel
