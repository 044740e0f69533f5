#include "flywheel/buffer/buffer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <thread>

#include "flywheel/buffer/test_util.h"
#include "flywheel/core/metrics.h"

namespace flywheel {
namespace {

using testing::MakeTrajectory;

using testing::In;
using testing::kLong;

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             StrCat("flywheel_buffer_test_", name, "_", ::getpid());
  std::filesystem::remove_all(dir);
  return dir.string();
}

std::vector<std::string> DrainIds(Buffer& buffer) {
  std::vector<std::string> ids;
  while (true) {
    auto batch = buffer.Sample(64, In(absl::Milliseconds(50)));
    if (!batch.ok()) break;
    for (const SampledItem& s : *batch) {
      for (const ItemMember& m : s.item->members) ids.push_back(m.trajectory->id);
    }
  }
  return ids;
}

TEST(BufferTest, GroupsAreReleasedWholeAndStragglersAfterTheDeadline) {
  VirtualClock clock;
  BufferOptions options;
  options.group_size = 3;
  options.min_group_size = 2;
  options.straggler_timeout_s = 10;
  auto buffer = Buffer::Create(options, &clock, /*start_group_timer=*/false);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  Buffer& b = **buffer;
  for (const char* id : {"a1", "a2"})
    ASSERT_TRUE(b.Insert(MakeTrajectory(id, 0, "A"), In(kLong)).ok());
  ASSERT_TRUE(b.Insert(MakeTrajectory("c1", 0, "C"), In(kLong)).ok());
  EXPECT_EQ(b.Sample(1, In(absl::Milliseconds(20))).status().code(),
            absl::StatusCode::kDeadlineExceeded);  // no group complete yet
  ASSERT_TRUE(b.Insert(MakeTrajectory("a3", 0, "A"), In(kLong)).ok());
  auto batch = b.Sample(10, In(kLong));
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->size(), 1u);
  EXPECT_EQ((*batch)[0].item->members.size(), 3u);  // one item: the whole group

  // B has 2 of 3 when its deadline passes: released partial. C has 1: discarded.
  for (const char* id : {"b1", "b2"})
    ASSERT_TRUE(b.Insert(MakeTrajectory(id, 0, "B"), In(kLong)).ok());
  clock.Advance(absl::Seconds(11));
  b.ExpireGroups();
  batch = b.Sample(10, In(kLong));
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(batch->size(), 1u);
  EXPECT_EQ((*batch)[0].item->members.size(), 2u);
  ASSERT_TRUE(b.Insert(MakeTrajectory("b3", 0, "B"), In(kLong)).ok());  // too late
  const BufferInfo info = b.Info();
  EXPECT_EQ(info.dropped_incomplete_group, 1);
  EXPECT_EQ(info.dropped_late_group_member, 1);
  EXPECT_EQ(info.pending_groups, 0);
}

TEST(BufferTest, GroupTimerExpiresStragglersOnTheRealClock) {
  BufferOptions options;
  options.group_size = 2;
  options.min_group_size = 1;
  options.straggler_timeout_s = 0.05;
  auto buffer = Buffer::Create(options);
  ASSERT_TRUE(buffer.ok());
  ASSERT_TRUE((*buffer)->Insert(MakeTrajectory("x1", 0, "X"), In(kLong)).ok());
  auto batch = (*buffer)->Sample(1, In(absl::Seconds(10)));  // blocks until the timer fires
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ((*batch)[0].item->members[0].trajectory->id, "x1");
}

TEST(BufferTest, StaleDropsAreCountedAndTheLagHistogramExported) {
  BufferOptions options;
  options.max_staleness = 1;
  auto buffer = Buffer::Create(options);
  ASSERT_TRUE(buffer.ok());
  Counter* stale = MetricsRegistry::Global().GetCounter("buffer.dropped{reason=stale}");
  const int64_t before = stale->value();
  ASSERT_TRUE((*buffer)->Insert(MakeTrajectory("old", 2), In(kLong)).ok());
  ASSERT_TRUE((*buffer)->Insert(MakeTrajectory("new", 4), In(kLong)).ok());
  (*buffer)->SetLearnerVersion(5);
  auto batch = (*buffer)->Sample(10, In(kLong));
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(batch->size(), 1u);
  EXPECT_EQ((*batch)[0].lag, 1);
  EXPECT_EQ(stale->value() - before, 1);
  EXPECT_EQ((*buffer)->Info().dropped_stale, 1);
  const auto snapshot = MetricsRegistry::Global().Snapshot().dump();
  EXPECT_NE(snapshot.find("buffer.sample_lag"), std::string::npos);
}

TEST(BufferTest, DurableRestartKeepsUnconsumedItemsAndCountsButNotConsumedOnes) {
  BufferOptions options;
  options.durable = true;
  options.path = TempDir("restart");
  options.max_size = 100;
  {
    auto buffer = Buffer::Create(options);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE((*buffer)->Insert(MakeTrajectory(StrCat("t", i), 3), In(kLong)).ok());
    }
    (*buffer)->SetLearnerVersion(4);
    auto batch = (*buffer)->Sample(4, In(kLong));
    ASSERT_TRUE(batch.ok());
    ASSERT_EQ(batch->size(), 4u);
    EXPECT_GT((*buffer)->Info().store_syncs, 0);
  }  // the process "ends": nothing else is written
  auto buffer = Buffer::Create(options);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const BufferInfo info = (*buffer)->Info();
  EXPECT_EQ(info.recovered, 6);
  EXPECT_EQ(info.table.size, 6);
  EXPECT_EQ(info.table.samples, 4);
  EXPECT_EQ(info.table.inserts, 10);
  EXPECT_EQ(info.table.learner_version, 4);
  const std::vector<std::string> ids = DrainIds(**buffer);
  EXPECT_EQ(ids, (std::vector<std::string>{"t4", "t5", "t6", "t7", "t8", "t9"}));
  std::filesystem::remove_all(options.path);
}

// A durable buffer of groups of two in a fresh directory named after the test.
BufferOptions DurablePairs(const std::string& name) {
  BufferOptions options;
  options.durable = true;
  options.path = TempDir(name);
  options.group_size = 2;
  return options;
}

TEST(BufferTest, DurableGroupMembersSurviveARestart) {
  const BufferOptions options = DurablePairs("groups");
  {
    auto buffer = Buffer::Create(options);
    ASSERT_TRUE(buffer.ok());
    ASSERT_TRUE((*buffer)->Insert(MakeTrajectory("g1", 0, "G"), In(kLong)).ok());
  }
  auto buffer = Buffer::Create(options);
  ASSERT_TRUE(buffer.ok());
  EXPECT_EQ((*buffer)->Info().pending_members, 1);
  ASSERT_TRUE((*buffer)->Insert(MakeTrajectory("g2", 0, "G"), In(kLong)).ok());
  auto batch = (*buffer)->Sample(1, In(kLong));
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ((*batch)[0].item->members.size(), 2u);
  std::filesystem::remove_all(options.path);
}

TEST(BufferTest, DiscardedPendingGroupsAreGoneAfterARestart) {
  const BufferOptions options = DurablePairs("discard");
  {
    auto buffer = Buffer::Create(options);
    ASSERT_TRUE(buffer.ok());
    Buffer& b = **buffer;
    for (const char* id : {"a1", "a2", "b1"}) {
      ASSERT_TRUE(b.Insert(MakeTrajectory(id, 0, id[0] == 'a' ? "A" : "B"), In(kLong)).ok());
    }
    absl::StatusOr<int64_t> discarded = b.DiscardPendingGroups();
    ASSERT_TRUE(discarded.ok()) << discarded.status();
    EXPECT_EQ(*discarded, 1);  // b1; the complete group A stays
    const BufferInfo info = b.Info();
    EXPECT_EQ(info.pending_members, 0);
    EXPECT_EQ(info.dropped_incomplete_group, 1);
    EXPECT_EQ(info.table.size, 1);
  }
  auto buffer = Buffer::Create(options);
  ASSERT_TRUE(buffer.ok());
  EXPECT_EQ((*buffer)->Info().pending_members, 0);  // b1's delete was written
  EXPECT_EQ(DrainIds(**buffer), (std::vector<std::string>{"a1", "a2"}));
  std::filesystem::remove_all(options.path);
}

TEST(BufferTest, ConcurrentDurableInsertsShareSyncs) {
  BufferOptions options;
  options.durable = true;
  options.path = TempDir("group_commit");
  options.max_size = 10000;
  auto buffer = Buffer::Create(options);
  ASSERT_TRUE(buffer.ok());
  std::vector<std::thread> producers;
  for (int p = 0; p < 8; ++p) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < 50; ++i) {
        EXPECT_TRUE((*buffer)->Insert(MakeTrajectory(StrCat(p, "-", i)), In(kLong)).ok());
      }
    });
  }
  for (auto& t : producers) t.join();
  const BufferInfo info = (*buffer)->Info();
  EXPECT_EQ(info.table.size, 400);
  EXPECT_LT(info.store_syncs, 400);  // group commit: fewer fsyncs than inserts
  buffer->reset();
  std::filesystem::remove_all(options.path);
}

TEST(BufferTest, StorageErrorIsLatched) {
  BufferOptions options;
  options.durable = true;
  options.path = TempDir("latch");
  auto buffer = Buffer::Create(options);
  ASSERT_TRUE(buffer.ok());
  ASSERT_TRUE((*buffer)->Insert(MakeTrajectory("ok"), In(kLong)).ok());
  (*buffer)->store()->FailNextWriteForTesting();
  absl::Status s = (*buffer)->Insert(MakeTrajectory("fails"), In(kLong));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  s = (*buffer)->Insert(MakeTrajectory("later"), In(kLong));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;  // stays failed, loudly
  EXPECT_NE(s.message().find("later writes fail"), absl::string_view::npos) << s;
  EXPECT_EQ((*buffer)->Info().table.size, 1);  // the failed inserts were not acknowledged
  buffer->reset();
  std::filesystem::remove_all(options.path);
}

TEST(BufferTest, CreateRefusesInvalidOptions) {
  BufferOptions options;
  options.max_size = 0;
  auto buffer = Buffer::Create(options);
  EXPECT_EQ(buffer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(buffer.status().message().find("buffer.max_size"), absl::string_view::npos);
}

}  // namespace
}  // namespace flywheel
