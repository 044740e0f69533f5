#include "flywheel/scheduler/remaining_tokens.h"

#include <gtest/gtest.h>

#include <vector>

namespace flywheel::scheduler {
namespace {

TEST(RemainingTokensTest, PriorBeforeAnyEpisodeFinished) {
  const RemainingTokens r(8, 40);
  EXPECT_EQ(r.Fresh(), 40);
  EXPECT_EQ(r.Remaining(10), 40);
  EXPECT_EQ(r.Remaining(100), 100);  // already past the prior: as long again
}

TEST(RemainingTokensTest, MeanResidualOfTheLongerEpisodes) {
  RemainingTokens r(8, 40);
  for (const int64_t length : {2, 4, 10, 40}) r.Observe(length);
  // Fresh: the mean length, (2 + 4 + 10 + 40) / 4 = 14.
  EXPECT_DOUBLE_EQ(r.Fresh(), 14);
  // After 3 tokens only 4, 10 and 40 are longer: (1 + 7 + 37) / 3 = 15.
  EXPECT_DOUBLE_EQ(r.Remaining(3), 15);
  // After 10 only 40: 30. The heavy tail: the longer it ran, the more it has left.
  EXPECT_DOUBLE_EQ(r.Remaining(10), 30);
  // Past every observed length: as long again.
  EXPECT_DOUBLE_EQ(r.Remaining(50), 50);
  const std::vector<int64_t> in_flight = {0, 3, 10};
  EXPECT_DOUBLE_EQ(r.Remaining(in_flight), 14 + 15 + 30);
}

TEST(RemainingTokensTest, KeepsOnlyTheWindow) {
  RemainingTokens r(2, 40);
  for (const int64_t length : {100, 4, 6}) r.Observe(length);
  EXPECT_EQ(r.observed(), 3);
  EXPECT_DOUBLE_EQ(r.Fresh(), 5);  // 100 left the window
}

}  // namespace
}  // namespace flywheel::scheduler
