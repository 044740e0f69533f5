#include "flywheel/buffer/table.h"

#include <gtest/gtest.h>

#include <thread>

#include "absl/synchronization/notification.h"
#include "flywheel/buffer/selectors/fifo.h"
#include "flywheel/buffer/test_util.h"
#include "flywheel/core/wait_for.h"

namespace flywheel {
namespace {

using testing::IdOf;
using testing::MakeTestItem;

using testing::In;
using testing::kLong;
// Long enough that a call which should block has had every chance to return wrongly.
constexpr absl::Duration kStillBlocked = absl::Milliseconds(100);

std::unique_ptr<Table> QueueTable(int64_t size) {
  TableOptions options;
  options.max_size = size;
  options.max_times_sampled = 1;
  options.removals_count_as_samples = true;
  return std::make_unique<Table>(options, std::make_unique<FifoSelector>(),
                                 RateLimiterOptions::Queue(size));
}

TEST(TableTest, QueueHandsOutEachItemOnceInOrder) {
  auto table = QueueTable(10);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(table->Insert(MakeTestItem(StrCat(i)), In(kLong)).ok());
  auto batch = table->Sample(3, In(kLong));
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->items.size(), 3u);
  EXPECT_EQ(IdOf(batch->items[0]), "0");
  EXPECT_EQ(IdOf(batch->items[2]), "2");
  EXPECT_EQ(batch->removed.size(), 3u);
  batch = table->Sample(10, In(kLong));
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->items.size(), 2u);
  EXPECT_EQ(table->Info().size, 0);
}

TEST(TableTest, SampleBlocksUntilAnInsertArrives) {
  auto table = QueueTable(10);
  absl::Notification sampled;
  std::thread consumer([&] {
    auto batch = table->Sample(1, In(kLong));
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (batch.ok()) {
      EXPECT_EQ(IdOf(batch->items[0]), "late");
    }
    sampled.Notify();
  });
  EXPECT_FALSE(sampled.WaitForNotificationWithTimeout(kStillBlocked));  // still blocked
  ASSERT_TRUE(table->Insert(MakeTestItem("late"), In(kLong)).ok());
  EXPECT_TRUE(sampled.WaitForNotificationWithTimeout(kLong));  // the insert unblocked it
  consumer.join();
  EXPECT_GT(table->Info().sample_blocked_ns, 0);
}

TEST(TableTest, FullTableBlocksProducerUntilASampleFreesRoom) {
  auto table = QueueTable(2);
  ASSERT_TRUE(table->Insert(MakeTestItem("a"), In(kLong)).ok());
  ASSERT_TRUE(table->Insert(MakeTestItem("b"), In(kLong)).ok());
  absl::Notification inserted;
  std::thread producer([&] {
    EXPECT_TRUE(table->Insert(MakeTestItem("c"), In(kLong)).ok());
    inserted.Notify();
  });
  EXPECT_FALSE(inserted.WaitForNotificationWithTimeout(kStillBlocked));  // backpressure
  EXPECT_EQ(table->Info().size, 2);                                      // nothing dropped
  ASSERT_TRUE(table->Sample(1, In(kLong)).ok());
  EXPECT_TRUE(inserted.WaitForNotificationWithTimeout(kLong));
  producer.join();
  EXPECT_EQ(table->Info().size, 2);
  EXPECT_GT(table->Info().insert_blocked_ns, 0);
}

TEST(TableTest, RatioLimiterBlocksInsertsUntilTheLearnerCatchesUp) {
  TableOptions options;
  options.max_size = 100;
  options.max_times_sampled = 0;
  options.remover = RemoverKind::kFifo;
  // spi 1, min size 1, error buffer 1: at most 2 unsampled inserts ahead.
  Table table(options, std::make_unique<FifoSelector>(),
              RateLimiterOptions::SampleToInsertRatio(1.0, 1, 1.0));
  ASSERT_TRUE(table.Insert(MakeTestItem("a"), In(kLong)).ok());
  ASSERT_TRUE(table.Insert(MakeTestItem("b"), In(kLong)).ok());
  absl::Status s = table.Insert(MakeTestItem("c"), In(absl::Milliseconds(20)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("rate limited"), absl::string_view::npos) << s;

  absl::Notification inserted;
  std::thread producer([&] {
    EXPECT_TRUE(table.Insert(MakeTestItem("c"), In(kLong)).ok());
    inserted.Notify();
  });
  EXPECT_FALSE(inserted.WaitForNotificationWithTimeout(kStillBlocked));
  ASSERT_TRUE(table.Sample(1, In(kLong)).ok());
  EXPECT_TRUE(inserted.WaitForNotificationWithTimeout(kLong));
  producer.join();
}

TEST(TableTest, RatioLimiterBlocksSamplesUntilInsertsArrive) {
  TableOptions options;
  options.max_size = 100;
  options.max_times_sampled = 0;  // replay: items stay
  options.remover = RemoverKind::kFifo;
  Table table(options, std::make_unique<FifoSelector>(),
              RateLimiterOptions::SampleToInsertRatio(2.0, 1, 2.0));
  ASSERT_TRUE(table.Insert(MakeTestItem("a"), In(kLong)).ok());  // diff 2: two samples
  auto batch = table.Sample(10, In(kLong));
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->items.size(), 2u);  // the limiter caps the batch
  absl::Notification sampled;
  std::thread consumer([&] {
    EXPECT_TRUE(table.Sample(1, In(kLong)).ok());
    sampled.Notify();
  });
  EXPECT_FALSE(sampled.WaitForNotificationWithTimeout(kStillBlocked));
  ASSERT_TRUE(table.Insert(MakeTestItem("b"), In(kLong)).ok());
  EXPECT_TRUE(sampled.WaitForNotificationWithTimeout(kLong));
  consumer.join();
}

TEST(TableTest, CloseWakesEveryWaiterWithCancelled) {
  auto table = QueueTable(1);
  ASSERT_TRUE(table->Insert(MakeTestItem("a"), In(kLong)).ok());
  auto empty = QueueTable(1);
  absl::Status insert_status, sample_status;
  std::thread producer([&] { insert_status = table->Insert(MakeTestItem("b"), In(kLong)); });
  std::thread consumer([&] { sample_status = empty->Sample(1, In(kLong)).status(); });
  // Both block before the tables close: Close must wake them, not merely refuse what comes after.
  EXPECT_TRUE(WaitFor([&] {
    return table->Info().producers_waiting == 1 && empty->Info().consumers_waiting == 1;
  }));
  table->Close();
  empty->Close();
  producer.join();
  consumer.join();
  EXPECT_EQ(insert_status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(sample_status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(table->Insert(MakeTestItem("c"), In(kLong)).code(), absl::StatusCode::kCancelled);
}

TEST(TableTest, DeadlineExceededSaysWhy) {
  auto table = QueueTable(1);
  auto s = table->Sample(1, In(absl::Milliseconds(10))).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("empty"), absl::string_view::npos) << s;
  ASSERT_TRUE(table->Insert(MakeTestItem("a"), In(kLong)).ok());
  s = table->Insert(MakeTestItem("b"), In(absl::Milliseconds(10)));
  EXPECT_NE(s.message().find("buffer.max_size"), absl::string_view::npos) << s;
}

TEST(TableTest, StaleItemsAreDroppedAndCountedAtSampleTime) {
  TableOptions options;
  options.max_size = 10;
  options.max_staleness = 2;
  options.removals_count_as_samples = true;
  Table table(options, std::make_unique<FifoSelector>(), RateLimiterOptions::Queue(10));
  ASSERT_TRUE(table.Insert(MakeTestItem("v1", 1), In(kLong)).ok());
  ASSERT_TRUE(table.Insert(MakeTestItem("v3", 3), In(kLong)).ok());
  ASSERT_TRUE(table.Insert(MakeTestItem("v5", 5), In(kLong)).ok());
  table.SetLearnerVersion(5);  // lags 4, 2, 0: only v1 exceeds 2
  auto batch = table.Sample(10, In(kLong));
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(batch->items.size(), 2u);
  EXPECT_EQ(IdOf(batch->items[0]), "v3");
  EXPECT_EQ(batch->items[0].lag, 2);
  EXPECT_EQ(batch->stale_lags, std::vector<int64_t>{4});
  EXPECT_EQ(table.Info().dropped_stale, 1);
  // Dropping counted as the queue's removal: the producer side is not blocked by it.
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(table.Insert(MakeTestItem(StrCat(i), 5), In(absl::Seconds(1))).ok()) << i;
  }
}

TEST(TableTest, AllStaleMeansTheSampleKeepsWaiting) {
  TableOptions options;
  options.max_size = 10;
  options.max_staleness = 0;
  options.removals_count_as_samples = true;
  Table table(options, std::make_unique<FifoSelector>(), RateLimiterOptions::Queue(10));
  table.SetLearnerVersion(9);
  ASSERT_TRUE(table.Insert(MakeTestItem("old", 1), In(kLong)).ok());
  auto batch = table.Sample(1, In(absl::Milliseconds(30)));
  ASSERT_TRUE(batch.ok());  // returns the removal so a durable store can delete it
  EXPECT_TRUE(batch->items.empty());
  EXPECT_TRUE(batch->removed.empty());
  EXPECT_EQ(batch->stale.size(), 1u);  // dropped, not handed out
}

// An acknowledgement of an item that is back in the table (after a restart) takes it out; in a
// queue that counts as its sample, so the limiter's inserts - samples stays the table's size.
TEST(TableTest, TakeRemovesTheItemsHoldingTheIdsAndCountsThemAsSamples) {
  TableOptions options;
  options.max_size = 2;
  options.removals_count_as_samples = true;
  Table table(options, std::make_unique<FifoSelector>(), RateLimiterOptions::Queue(2));
  for (const char* id : {"a", "b"}) ASSERT_TRUE(table.Insert(MakeTestItem(id), In(kLong)).ok());
  EXPECT_EQ(table.Insert(MakeTestItem("c"), In(absl::Milliseconds(10))).code(),
            absl::StatusCode::kDeadlineExceeded);  // full
  const auto taken = table.Take({"a", "unknown"});
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0]->members[0].trajectory->id, "a");
  EXPECT_EQ(table.Info().size, 1);
  ASSERT_TRUE(table.Insert(MakeTestItem("c"), In(absl::Milliseconds(10))).ok());  // room again
  auto batch = table.Sample(10, In(kLong));
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(batch->items.size(), 2u);
  EXPECT_EQ(testing::IdOf(batch->items[0]), "b");
}

TEST(TableTest, FifoRemoverEvictsOldestWhenFull) {
  TableOptions options;
  options.max_size = 2;
  options.max_times_sampled = 0;
  options.remover = RemoverKind::kFifo;
  Table table(options, std::make_unique<FifoSelector>(),
              RateLimiterOptions::SampleToInsertRatio(1.0, 1, 100.0));
  std::vector<std::shared_ptr<const Item>> evicted;
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_TRUE(table.Insert(MakeTestItem(id), In(kLong), &evicted).ok());
  }
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0]->members[0].trajectory->id, "a");
  EXPECT_EQ(table.Info().evicted, 1);
}

TEST(TableTest, MaxTimesSampledRemovesAfterThatMany) {
  TableOptions options;
  options.max_size = 10;
  options.max_times_sampled = 2;
  Table table(options, std::make_unique<FifoSelector>(),
              RateLimiterOptions::SampleToInsertRatio(2.0, 1, 2.0));
  ASSERT_TRUE(table.Insert(MakeTestItem("a"), In(kLong)).ok());
  auto batch = table.Sample(2, In(kLong));
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(batch->items.size(), 2u);
  EXPECT_EQ(batch->items[1].times_sampled, 2);
  EXPECT_EQ(batch->removed.size(), 1u);
  EXPECT_EQ(table.Info().size, 0);
}

TEST(TableTest, ReserveThenCommitOrCancel) {
  auto table = QueueTable(1);
  ASSERT_TRUE(table->ReserveInsert(In(kLong)).ok());
  // The reservation holds the only slot.
  EXPECT_EQ(table->ReserveInsert(In(absl::Milliseconds(10))).code(),
            absl::StatusCode::kDeadlineExceeded);
  table->CancelInsert();
  ASSERT_TRUE(table->ReserveInsert(In(kLong)).ok());
  table->CommitInsert(MakeTestItem("a"));
  auto batch = table->Sample(1, In(kLong));
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(IdOf(batch->items[0]), "a");
}

TEST(TableTest, ReserveInsertsTakesWhatFitsAfterTheFirst) {
  auto table = QueueTable(3);
  ASSERT_TRUE(table->Insert(MakeTestItem("a"), In(kLong)).ok());
  auto reserved = table->ReserveInserts(5, In(kLong));
  ASSERT_TRUE(reserved.ok());
  EXPECT_EQ(*reserved, 2);  // only two slots left; the rest are not waited for
  table->CommitInserts({MakeTestItem("b")});
  table->CancelInserts(1);
  EXPECT_EQ(table->Info().size, 2);
  EXPECT_EQ(table->Info().inserts, 2);
  EXPECT_EQ(table->ReserveInserts(1, In(kLong)).value(), 1);
}

}  // namespace
}  // namespace flywheel
