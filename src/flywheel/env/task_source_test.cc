#include "flywheel/env/task_source.h"

#include <gtest/gtest.h>

#include <set>

namespace flywheel {
namespace {

TEST(TaskSourceTest, HandsOutEachInstanceGroupSizeTimes) {
  TaskSource tasks("guess", 1, 4);
  std::set<uint64_t> seeds;
  for (int group = 0; group < 3; ++group) {
    const TaskInstance first = tasks.Next();
    EXPECT_EQ(first.task, "guess");
    EXPECT_EQ(first.group, group);
    EXPECT_EQ(first.rollout, 0);
    for (int r = 1; r < 4; ++r) {
      const TaskInstance t = tasks.Next();
      EXPECT_EQ(t.seed, first.seed);
      EXPECT_EQ(t.group, group);
      EXPECT_EQ(t.rollout, r);
    }
    seeds.insert(first.seed);
  }
  EXPECT_EQ(seeds.size(), 3u) << "groups must get different instances";
}

TEST(TaskSourceTest, SameSeedSameInstancesDifferentSeedDifferent) {
  TaskSource a("guess", 5, 2), b("guess", 5, 2), c("guess", 6, 2);
  for (int i = 0; i < 10; ++i) {
    const uint64_t sa = a.Next().seed;
    EXPECT_EQ(sa, b.Next().seed);
    EXPECT_NE(sa, c.Next().seed);
  }
}

TEST(TaskSourceTest, NextGroupIsWholeEvenAfterSingleRollouts) {
  TaskSource tasks("calc", 1, 3);
  const TaskInstance single = tasks.Next();  // group 0, rollout 0
  const std::vector<TaskInstance> group = tasks.NextGroup();
  ASSERT_EQ(group.size(), 3u);
  EXPECT_EQ(group[0].group, 1);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(group[r].rollout, r);
    EXPECT_EQ(group[r].seed, group[0].seed);
  }
  EXPECT_NE(group[0].seed, single.seed);
  // The skipped rollouts of group 0 were never handed out.
  EXPECT_EQ(tasks.handed_out(), 4);
}

}  // namespace
}  // namespace flywheel
