// The table: items, a selector that picks what to sample, a rate limiter that decides when
// each side may go, and the staleness filter applied at sample time.
//
//   producers ── Insert (await: not full, limiter allows; commit: selector + items_) ──┐
//                                                                                     ▼
//                                             mu_ ─ items_ (btree by key), selector_, limiter_
//                                                                                     │
//   consumer  ◀── Sample (await: limiter allows; commit: pick, drop stale, count) ────┘
//
// Every wait has a deadline and wakes on Close(). Admission is split into await and commit and
// re-checks its condition after waking (Reverb's AwaitCanInsert / Insert). The durable path
// reserves a slot (ReserveInsert), writes the item to the log outside the lock, then commits.
// Thread-safe.
#ifndef FLYWHEEL_BUFFER_TABLE_H_
#define FLYWHEEL_BUFFER_TABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/buffer/buffer_options.h"
#include "flywheel/buffer/item.h"
#include "flywheel/buffer/rate_limiter.h"
#include "flywheel/buffer/selectors/interface.h"

namespace flywheel {

struct TableOptions {
  int64_t max_size = 1000;
  int64_t max_times_sampled = 1;  // 0 = never removed by sampling
  RemoverKind remover = RemoverKind::kBlock;
  int64_t max_staleness = -1;  // -1 = off
  // Queue semantics: an item that leaves without being handed out (stale) still counts as a
  // sample for the limiter, since in a queue every insert is matched by exactly one removal.
  bool removals_count_as_samples = false;
};

struct TableInfo {
  int64_t size = 0;
  int64_t max_size = 0;
  int64_t inserts = 0;  // rate limiter's count
  int64_t samples = 0;
  int64_t learner_version = 0;
  int64_t dropped_stale = 0;
  int64_t evicted = 0;
  int64_t insert_blocked_ns = 0;  // total time producers waited
  int64_t sample_blocked_ns = 0;  // total time consumers waited
  std::string rate_limiter;
};

class Table {
 public:
  Table(const TableOptions& options, std::unique_ptr<ItemSelector> selector,
        const RateLimiterOptions& limiter);
  ~Table();

  // Waits until the item fits and the limiter allows an insert, then commits it. Items evicted
  // to make room (remover = fifo) are appended to `evicted`.
  absl::Status Insert(ItemPtr item, absl::Time deadline,
                      std::vector<std::shared_ptr<const Item>>* evicted = nullptr);

  // The durable path: reserve a slot (counted by the limiter and the size), write, then either
  // commit or cancel. Exactly one of CommitInsert / CancelInsert follows a successful reserve.
  absl::Status ReserveInsert(absl::Time deadline);
  void CommitInsert(ItemPtr item);
  void CancelInsert();
  // Batch forms under one lock: waits until the deadline for the first slot, then reserves
  // up to `max_count` in all while they fit without waiting. Returns how many were reserved.
  absl::StatusOr<int64_t> ReserveInserts(int64_t max_count, absl::Time deadline);
  void CommitInserts(std::vector<ItemPtr> items);
  void CancelInserts(int64_t count);

  // Waits like Insert without reserving: a group member feels backpressure on arrival.
  absl::Status AwaitCanInsert(absl::Time deadline);
  // Inserts without waiting; the table may exceed max_size by this item (a released group).
  // count_insert = false when restoring items after a restart (the limiter's counts are
  // restored separately).
  void InsertNow(ItemPtr item, bool count_insert,
                 std::vector<std::shared_ptr<const Item>>* evicted = nullptr);

  struct SampleResult {
    std::vector<SampledItem> items;
    // Items of `items` that left the table in this call (sampled max_times_sampled times); the
    // durable store deletes them before the batch is handed out, or keeps them leased.
    std::vector<std::shared_ptr<const Item>> removed;
    // Items dropped as stale in this call, and the lag of each.
    std::vector<std::shared_ptr<const Item>> stale;
    std::vector<int64_t> stale_lags;
  };
  // Waits until at least one sample is allowed, then takes up to `max_batch` items that the
  // limiter allows without waiting again. Stale items met on the way are dropped and counted.
  absl::StatusOr<SampleResult> Sample(int64_t max_batch, absl::Time deadline);

  // Removes the items holding any of `trajectory_ids` (a scan: for the rare acknowledgement of
  // an item that is back in the table after a restart) and returns them. Each counts as a
  // sample for the limiter when removals count as samples (queue).
  std::vector<std::shared_ptr<const Item>> Take(
      const absl::flat_hash_set<std::string>& trajectory_ids);

  void SetLearnerVersion(int64_t version);
  // After a restart: the limiter's counts and the learner version as last stored.
  void RestoreCounts(int64_t inserts, int64_t samples, int64_t learner_version);

  // Wakes every waiter with CANCELLED; later calls fail the same way.
  void Close();
  bool closed() const;

  TableInfo Info() const;
  std::string DebugString() const;

 private:
  int64_t SizeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int64_t>(items_.size()) + reserved_;
  }
  bool CanInsertLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AwaitInsertLocked(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CommitLocked(ItemPtr item, bool count_insert,
                    std::vector<std::shared_ptr<const Item>>* evicted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsStaleLocked(const Item& item) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WakeProducers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WakeConsumers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TableOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar can_insert_;
  absl::CondVar can_sample_;
  int64_t producers_waiting_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t consumers_waiting_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<ItemSelector> selector_ ABSL_GUARDED_BY(mu_);
  RateLimiter limiter_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<uint64_t, ItemPtr> items_ ABSL_GUARDED_BY(mu_);
  int64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_key_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t learner_version_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t dropped_stale_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evicted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t insert_blocked_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sample_blocked_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

// The selector for `kind`.
std::unique_ptr<ItemSelector> MakeSelector(SelectorKind kind, double priority_exponent,
                                           uint64_t seed = 1);

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_TABLE_H_
