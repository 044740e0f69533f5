// Idempotent inserts and leases of a durable buffer, across restarts (buffer.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <thread>

#include "absl/synchronization/notification.h"
#include "flywheel/buffer/buffer.h"
#include "flywheel/buffer/test_util.h"

namespace flywheel {
namespace {

using testing::MakeTrajectory;

using testing::In;
using testing::kLong;

class LeaseTest : public ::testing::Test {
 protected:
  LeaseTest()
      : path_((std::filesystem::temp_directory_path() /
               StrCat("flywheel_lease_test_", ::getpid(), "_",
                      ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                  .string()) {
    std::filesystem::remove_all(path_);
  }
  ~LeaseTest() override {
    buffer_.reset();
    std::filesystem::remove_all(path_);
  }

  // (Re)opens the durable buffer on the same directory, as a restart does.
  void Open(int64_t group_size = 1) {
    buffer_.reset();
    BufferOptions options;
    options.durable = true;
    options.path = path_;
    options.max_size = 100;
    options.group_size = group_size;
    options.straggler_timeout_s = 3600;
    auto buffer = Buffer::Create(options, RealClock(), /*start_group_timer=*/false);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    buffer_ = *std::move(buffer);
  }

  void Insert(const std::string& id, const std::string& group = "") {
    ASSERT_TRUE(buffer_->Insert(MakeTrajectory(id, 0, group), In(kLong)).ok()) << id;
  }

  // Every trajectory id of the next batch (empty when none comes within 50 ms).
  std::vector<std::string> SampleIds(std::string_view owner = {}, int64_t max_batch = 64) {
    std::vector<std::string> ids;
    auto batch = buffer_->Sample(max_batch, In(absl::Milliseconds(50)), owner);
    if (!batch.ok()) return ids;
    for (const SampledItem& s : *batch) {
      for (const ItemMember& m : s.item->members) ids.push_back(m.trajectory->id);
    }
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  Buffer::AcknowledgeResult Ack(const std::vector<std::string>& ids, bool release_others = false,
                                const absl::flat_hash_set<std::string>& keep = {}) {
    std::vector<DurableStore::Consumed> consumed;
    for (const std::string& id : ids) consumed.push_back({id, "trained"});
    auto result = buffer_->Acknowledge("learner", consumed, release_others, keep);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : Buffer::AcknowledgeResult{};
  }

  std::string path_;
  std::unique_ptr<Buffer> buffer_;
};

using Ids = std::vector<std::string>;

TEST_F(LeaseTest, ARepeatedIdIsAcknowledgedOnceWhileHeldAfterConsumedAndAfterARestart) {
  Open();
  Insert("a");
  Insert("a");
  EXPECT_EQ(buffer_->Info().duplicate_inserts, 1);
  EXPECT_EQ(buffer_->Info().table.size, 1);
  EXPECT_EQ(SampleIds(), Ids{"a"});  // consumed without a lease
  Insert("a");
  EXPECT_EQ(SampleIds(), Ids{});
  Insert("b");
  Open();  // b held in the store, a in its consumed records
  Insert("a");
  Insert("b");
  EXPECT_EQ(buffer_->Info().duplicate_inserts, 2);
  EXPECT_EQ(SampleIds(), Ids{"b"});
}

TEST_F(LeaseTest, AStreamBatchStoresEachNewIdOnceAndAcknowledgesTheRepeats) {
  Open();
  std::vector<ItemMember> members;
  for (const char* id : {"x", "y", "x", "z", "y"}) {
    members.push_back(ItemMember{MakeTrajectory(id), nullptr, 0});
  }
  std::vector<absl::Status> statuses;
  size_t done = 0;
  while (done < members.size()) done += buffer_->InsertBatch(members, done, In(kLong), &statuses);
  ASSERT_EQ(statuses.size(), 5u);
  for (const absl::Status& s : statuses) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(buffer_->Info().duplicate_inserts, 2);
  EXPECT_EQ(SampleIds(), (Ids{"x", "y", "z"}));
}

TEST_F(LeaseTest, AnInsertOfAnIdInFlightWaitsForTheOriginalsOutcome) {
  Open();
  // Hold the first insert's sync; the retry of the same id must not store a second copy.
  absl::Notification syncing, release;
  buffer_->store()->SetBeforeSyncForTesting([&] {
    if (!syncing.HasBeenNotified()) syncing.Notify();
    release.WaitForNotification();
  });
  std::thread original([&] { Insert("a"); });
  syncing.WaitForNotification();
  absl::Status retry;
  std::thread retried([&] { retry = buffer_->Insert(MakeTrajectory("a"), In(kLong)); });
  absl::SleepFor(absl::Milliseconds(50));
  release.Notify();
  original.join();
  retried.join();
  EXPECT_TRUE(retry.ok()) << retry;
  EXPECT_EQ(buffer_->Info().duplicate_inserts, 1);
  EXPECT_EQ(SampleIds(), Ids{"a"});
}

TEST_F(LeaseTest, LeasedItemsStayInTheStoreUntilAcknowledged) {
  Open();
  for (const char* id : {"a", "b", "c"}) Insert(id);
  EXPECT_EQ(SampleIds("learner"), (Ids{"a", "b", "c"}));
  EXPECT_EQ(buffer_->Info().leased, 3);
  const Buffer::AcknowledgeResult acked = Ack({"a", "b"});
  EXPECT_EQ(acked.consumed, 2);
  EXPECT_EQ(buffer_->Info().leased, 1);
  // A restart forgets the lease: the unacknowledged item is available again, the others gone.
  Open();
  EXPECT_EQ(buffer_->Info().leased, 0);
  EXPECT_EQ(SampleIds("learner"), Ids{"c"});
  // Acknowledged ids are remembered as consumed: a late retry is not stored again.
  Insert("a");
  EXPECT_EQ(buffer_->Info().duplicate_inserts, 1);
}

TEST_F(LeaseTest, ReleasingReturnsEveryOtherLeaseOfTheOwnerExceptTheKeptOnes) {
  Open();
  for (const char* id : {"a", "b", "c", "d"}) Insert(id);
  ASSERT_EQ(SampleIds("learner"), (Ids{"a", "b", "c", "d"}));
  ASSERT_TRUE(buffer_->Sample(1, In(absl::Milliseconds(10)), "other").status().code() ==
              absl::StatusCode::kDeadlineExceeded);
  const Buffer::AcknowledgeResult r = Ack({"a"}, /*release_others=*/true, {"b"});
  EXPECT_EQ(r.consumed, 1);
  EXPECT_EQ(r.released, 2);  // c and d; b is kept
  EXPECT_EQ(buffer_->Info().leased, 1);
  EXPECT_EQ(SampleIds("learner"), (Ids{"c", "d"}));
}

TEST_F(LeaseTest, AnAcknowledgementAfterARestartTakesTheItemOutOfTheTableAndItsGroup) {
  Open(/*group_size=*/2);
  Insert("g1a", "g1");
  Insert("g1b", "g1");
  Insert("g2a", "g2");  // its group stays pending
  ASSERT_EQ(SampleIds("learner"), (Ids{"g1a", "g1b"}));
  Open(2);  // g1 is released again from the store; g2a pending again
  const Buffer::AcknowledgeResult r = Ack({"g1a", "g1b", "g2a", "never-seen"});
  EXPECT_EQ(r.consumed, 3);
  EXPECT_EQ(r.unknown, 1);
  EXPECT_EQ(SampleIds("learner"), Ids{});
  EXPECT_EQ(buffer_->Info().pending_members, 0);
  Open(2);
  EXPECT_EQ(buffer_->Info().recovered, 0);
}

}  // namespace
}  // namespace flywheel
