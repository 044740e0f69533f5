#include "flywheel/buffer/durable_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "flywheel/buffer/store_test_util.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

std::string StoreTempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             StrCat("flywheel_durable_store_test_", name, "_", ::getpid());
  std::filesystem::remove_all(dir);
  return dir.string();
}

using testing::StoreContents;

DurableStore::Write Puts(uint64_t first, uint64_t last) {
  DurableStore::Write w;
  for (uint64_t k = first; k <= last; ++k) {
    w.puts.emplace_back(k, std::make_shared<const std::string>(StrCat("v", k)));
  }
  return w;
}

// Deletes become range tombstones over runs of consecutive keys: keys between runs, and
// keys next to a run, must survive, in this process and after a reopen.
TEST(DurableStoreTest, DeletesRemoveExactlyTheirKeysAcrossRunsAndReopen) {
  const std::string path = StoreTempDir("runs");
  {
    auto store = DurableStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Commit(Puts(1, 20)).ok());
    DurableStore::Write del;
    del.deletes = {9, 2, 3, 4, 7, 10, 11, 3, 15, 20};  // unsorted, one duplicate
    ASSERT_TRUE((*store)->Commit(del).ok());
    // A put after the deletes, inside a deleted run's span, is not hidden by it.
    ASSERT_TRUE((*store)->Commit(Puts(21, 22)).ok());
    const std::map<uint64_t, std::string> live = StoreContents(**store);
    std::vector<uint64_t> keys;
    for (const auto& [k, v] : live) keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<uint64_t>{1, 5, 6, 8, 12, 13, 14, 16, 17, 18, 19, 21, 22}));
    EXPECT_EQ(live.at(8), "v8");
  }
  auto reopened = DurableStore::Open(path);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ(StoreContents(**reopened).size(), 13u);
  reopened->reset();
  std::filesystem::remove_all(path);
}

std::vector<std::string> ConsumedRecords(const DurableStore& store) {
  std::vector<std::string> out;
  EXPECT_TRUE(store
                  .ForEachConsumed([&](std::string_view id, std::string_view reason) {
                    out.push_back(StrCat(reason, ":", id));
                    return absl::OkStatus();
                  })
                  .ok());
  return out;
}

// What keeps inserts idempotent across a restart: the ids consumed with a delete are recorded
// in the same batch, survive a reopen, and only the newest consumed_kept (plus at most an
// eighth) are kept.
TEST(DurableStoreTest, ConsumedRecordsGoWithTheirDeletesAndAreBounded) {
  const std::string path = StoreTempDir("consumed");
  {
    auto store = DurableStore::Open(path, nullptr, /*consumed_kept=*/8);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Commit(Puts(1, 3)).ok());
    DurableStore::Write w;
    w.deletes = {1, 2};
    w.consumed = {{"a", "trained"}, {"b", "stale"}};
    ASSERT_TRUE((*store)->Commit(w).ok());
    EXPECT_EQ(ConsumedRecords(**store), (std::vector<std::string>{"trained:a", "stale:b"}));
    EXPECT_EQ(StoreContents(**store).size(), 1u);
  }
  {
    auto store = DurableStore::Open(path, nullptr, 8);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(ConsumedRecords(**store), (std::vector<std::string>{"trained:a", "stale:b"}));
    // Sequence numbers go on after the reopen: 30 more, of which the newest 8 (or 9) remain.
    for (int i = 0; i < 30; ++i) {
      DurableStore::Write w;
      w.consumed = {{StrCat("x", i), "sampled"}};
      ASSERT_TRUE((*store)->Commit(w).ok());
    }
    const std::vector<std::string> kept = ConsumedRecords(**store);
    EXPECT_GE(kept.size(), 8u);
    EXPECT_LE(kept.size(), 9u);
    EXPECT_EQ(kept.back(), "sampled:x29");
  }
  auto store = DurableStore::Open(path, nullptr, 8);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(ConsumedRecords(**store).back(), "sampled:x29");
  store->reset();
  std::filesystem::remove_all(path);
}

TEST(DurableStoreTest, AddDeletesCoalescesRuns) {
  rocksdb::WriteBatch batch;
  std::vector<uint64_t> keys = {5, 1, 2, 3, 9, 6};
  AddDeletes(keys, &batch);
  // Runs {1,2,3} and {5,6} as ranges, 9 alone as a point deletion.
  EXPECT_EQ(batch.Count(), 3u);
  EXPECT_TRUE(batch.HasDeleteRange());
  EXPECT_TRUE(batch.HasDelete());
}

// Holds each WAL sync at its start until the test lets it go.
class SyncGate {
 public:
  explicit SyncGate(DurableStore& store) {
    store.SetBeforeSyncForTesting([this] {
      absl::MutexLock lock(&mu_);
      const int mine = ++entered_;
      Wait wait{this, mine};
      mu_.Await(absl::Condition(&Released, &wait));
    });
  }
  // Until `n` syncs have started (and are held).
  void AwaitEntered(int n) {
    absl::MutexLock lock(&mu_);
    Wait wait{this, n};
    EXPECT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&Entered, &wait), absl::Seconds(10)))
        << "sync " << n << " never started";
  }
  void ReleaseOne() {
    absl::MutexLock lock(&mu_);
    ++released_;
  }

 private:
  struct Wait {
    SyncGate* gate;
    int n;
  };
  static bool Released(Wait* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return w->gate->released_ >= w->n;
  }
  static bool Entered(Wait* w) ABSL_NO_THREAD_SAFETY_ANALYSIS { return w->gate->entered_ >= w->n; }

  absl::Mutex mu_;
  int entered_ ABSL_GUARDED_BY(mu_) = 0;
  int released_ ABSL_GUARDED_BY(mu_) = 0;
};

// A commit in a background thread, with its result.
struct PendingCommit {
  PendingCommit(DurableStore& store, DurableStore::Write w) : write(std::move(w)) {
    thread = std::thread([this, &store] {
      status = store.Commit(write);
      done.Notify();
    });
  }
  ~PendingCommit() { thread.join(); }
  DurableStore::Write write;
  absl::Status status;
  absl::Notification done;
  std::thread thread;
};

void AwaitBatches(const DurableStore& store, int64_t n) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (store.batches() < n && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_GE(store.batches(), n);
}

// The next batch is appended while a sync is in flight, but acknowledged only by a sync that
// started after its append: never by the one already running.
TEST(DurableStoreTest, CommitReturnsOnlyAfterASyncThatStartedAfterItsAppend) {
  const std::string path = StoreTempDir("pipeline");
  auto store = DurableStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  SyncGate gate(**store);
  {
    PendingCommit a(**store, Puts(1, 1));
    gate.AwaitEntered(1);  // a's batch appended, its sync held
    EXPECT_FALSE(a.done.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
    PendingCommit b(**store, Puts(2, 3));
    AwaitBatches(**store, 2);  // b appended while the first sync is in flight
    gate.ReleaseOne();
    ASSERT_TRUE(a.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_TRUE(a.status.ok()) << a.status;
    gate.AwaitEntered(2);  // b needs a sync of its own
    EXPECT_FALSE(b.done.HasBeenNotified());
    gate.ReleaseOne();
    ASSERT_TRUE(b.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_TRUE(b.status.ok()) << b.status;
  }
  EXPECT_EQ((*store)->syncs(), 2);
  EXPECT_EQ((*store)->batches(), 2);
  EXPECT_EQ(StoreContents(**store).size(), 3u);
  store->reset();
  std::filesystem::remove_all(path);
}

// A failed sync fails every writer it would have acknowledged and those appended behind it,
// and latches the store.
TEST(DurableStoreTest, FailedSyncFailsTheWaitingWritersAndLatches) {
  const std::string path = StoreTempDir("sync_failure");
  auto store = DurableStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Commit(Puts(1, 1)).ok());
  SyncGate gate(**store);
  (*store)->FailNextSyncForTesting();
  {
    PendingCommit a(**store, Puts(2, 2));
    gate.AwaitEntered(1);  // a's sync, which will fail, is held
    PendingCommit b(**store, Puts(3, 3));
    AwaitBatches(**store, 3);  // b appended behind it
    gate.ReleaseOne();
    ASSERT_TRUE(a.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    ASSERT_TRUE(b.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_EQ(a.status.code(), absl::StatusCode::kDataLoss) << a.status;
    EXPECT_EQ(b.status.code(), absl::StatusCode::kDataLoss) << b.status;
    EXPECT_NE(a.status.message().find("injected sync failure"), absl::string_view::npos);
  }
  EXPECT_EQ((*store)->status().code(), absl::StatusCode::kDataLoss);
  const absl::Status later = (*store)->Commit(Puts(4, 4));
  EXPECT_EQ(later.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(later.message().find("restart to recover"), absl::string_view::npos) << later;
  store->reset();
  std::filesystem::remove_all(path);
}

// A failed append fails its group (nothing of it is synced or acknowledged) and latches.
TEST(DurableStoreTest, FailedAppendLatches) {
  const std::string path = StoreTempDir("append_failure");
  auto store = DurableStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  (*store)->FailNextWriteForTesting();
  EXPECT_EQ((*store)->Commit(Puts(1, 1)).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ((*store)->Commit(Puts(2, 2)).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ((*store)->syncs(), 0);
  store->reset();
  std::filesystem::remove_all(path);
}

}  // namespace
}  // namespace flywheel
