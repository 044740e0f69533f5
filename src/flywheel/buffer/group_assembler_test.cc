#include "flywheel/buffer/group_assembler.h"

#include <gtest/gtest.h>

#include "flywheel/buffer/test_util.h"

namespace flywheel {
namespace {

ItemMember Member(const std::string& id, const std::string& group) {
  return ItemMember{testing::MakeTrajectory(id, 0, group), nullptr, 0};
}

TEST(GroupAssemblerTest, ReleasesWhenAllMembersArrived) {
  GroupAssembler a(3, 2, absl::Seconds(10));
  const absl::Time t0 = absl::UnixEpoch();
  GroupAssembler::Output out;
  a.Add(Member("a1", "A"), t0, &out);
  a.Add(Member("b1", "B"), t0, &out);
  a.Add(Member("a2", "A"), t0, &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(a.pending_members(), 3);
  a.Add(Member("a3", "A"), t0, &out);
  ASSERT_EQ(out.released.size(), 1u);
  ASSERT_EQ(out.released[0].size(), 3u);
  EXPECT_EQ(out.released[0][2].trajectory->id, "a3");
  EXPECT_EQ(a.pending_groups(), 1);
}

TEST(GroupAssemblerTest, StragglerDeadlineReleasesPartialOrDiscards) {
  GroupAssembler a(4, 2, absl::Seconds(10));
  const absl::Time t0 = absl::UnixEpoch();
  GroupAssembler::Output out;
  a.Add(Member("a1", "A"), t0, &out);
  a.Add(Member("a2", "A"), t0 + absl::Seconds(5), &out);
  a.Add(Member("b1", "B"), t0 + absl::Seconds(1), &out);
  a.Expire(t0 + absl::Seconds(9), &out);
  EXPECT_TRUE(out.empty());  // not yet
  a.Expire(t0 + absl::Seconds(11), &out);
  ASSERT_EQ(out.released.size(), 1u);  // A: 2 of 4 >= min_group_size
  EXPECT_EQ(out.released[0].size(), 2u);
  ASSERT_EQ(out.discarded_incomplete.size(), 1u);  // B: 1 < 2
  EXPECT_EQ(out.discarded_incomplete[0].trajectory->id, "b1");

  GroupAssembler::Output late;
  a.Add(Member("a3", "A"), t0 + absl::Seconds(12), &late);  // the rest of a late group
  a.Add(Member("b2", "B"), t0 + absl::Seconds(12), &late);
  EXPECT_TRUE(late.released.empty());
  EXPECT_EQ(late.discarded_late.size(), 2u);
  EXPECT_EQ(a.pending_groups(), 0);
}

TEST(GroupAssemblerTest, DiscardPendingEndsEveryUnfinishedGroup) {
  GroupAssembler a(3, 1, absl::Seconds(10));
  const absl::Time t0 = absl::UnixEpoch();
  GroupAssembler::Output out;
  a.Add(Member("a1", "A"), t0, &out);
  a.Add(Member("a2", "A"), t0, &out);
  a.Add(Member("b1", "B"), t0, &out);
  a.DiscardPending(&out);
  EXPECT_TRUE(out.released.empty());  // A has 2 >= min_group_size members, but not all 3
  EXPECT_EQ(out.discarded_incomplete.size(), 3u);
  EXPECT_EQ(a.pending_groups(), 0);
  EXPECT_EQ(a.pending_members(), 0);

  GroupAssembler::Output late;
  a.Add(Member("a3", "A"), t0 + absl::Seconds(1), &late);  // the rest comes too late
  EXPECT_TRUE(late.released.empty());
  EXPECT_EQ(late.discarded_late.size(), 1u);
}

TEST(GroupAssemblerTest, NoGroupIdIsAGroupOfOne) {
  GroupAssembler a(4, 4, absl::Seconds(10));
  GroupAssembler::Output out;
  a.Add(Member("solo", ""), absl::UnixEpoch(), &out);
  ASSERT_EQ(out.released.size(), 1u);
}

}  // namespace
}  // namespace flywheel
