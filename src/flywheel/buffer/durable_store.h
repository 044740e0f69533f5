// The durable log of a buffer in durable mode: RocksDB with a synced write-ahead log.
//
//   producer threads ─┐  Commit(puts, deletes)
//   consumer thread  ─┼─▶ writers_ queue ─▶ write stage: the front writer (leader) merges every
//   ...              ─┘                     queued request into one WriteBatch and appends it
//                                           to the WAL (sync = false)
//                                        ─▶ sync stage: one waiter at a time syncs the WAL
//                                           (SyncWAL) for every batch appended before the sync
//                                           started, then wakes the writers it covered
//
// This is group commit as in LevelDB's DBImpl::Write, pipelined: while one sync is in flight
// the next group is already being appended, so the fsync overlaps the checksumming and copying
// of the next batch instead of adding to it. An insert still returns only once its batch is in
// the synced WAL: a sync acknowledges only batches whose append returned before it started.
// Keys: "t" + big-endian storage key -> serialized flywheel.v1.Trajectory; "m" -> Meta;
// "c" + big-endian sequence -> "reason\tid" of a trajectory that left the buffer (consumed
// records: what keeps inserts idempotent across a restart, id_ledger.h). A consumed record is
// written in the same WriteBatch as the delete of its item, and only the newest
// `consumed_kept` of them are kept (older ones are range-deleted as new ones arrive).
// Deleted runs of consecutive keys are written as range tombstones (see AddDeletes).
// A failed append or sync is latched: it fails every writer not yet synced, and every later
// Commit fails with the same error (LevelDB bg_error_), except a full disk: its latch
// (ResourceExhausted) is retried by the next Commit, which resumes once writes succeed again.
// A failed fsync is never retried (after one the kernel may have dropped the unsynced pages).
// Thread-safe.
#ifndef FLYWHEEL_BUFFER_DURABLE_STORE_H_
#define FLYWHEEL_BUFFER_DURABLE_STORE_H_

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace flywheel {

class DurableStore {
 public:
  // Bookkeeping recovered on restart.
  struct Meta {
    int64_t inserts = 0;  // rate limiter counts
    int64_t samples = 0;
    int64_t learner_version = 0;
  };

  // A trajectory that left the buffer, and why ("trained", "stale", "sampled", …).
  struct Consumed {
    std::string id;
    std::string reason;
  };

  struct Write {
    std::vector<std::pair<uint64_t, std::shared_ptr<const std::string>>> puts;
    std::vector<uint64_t> deletes;
    std::vector<Consumed> consumed;  // recorded in the same batch as the deletes
  };

  // `env` (not owned; it must outlive the store) replaces RocksDB's default environment, e.g.
  // a fault-injecting file system (fault_injection_fs.h); null = the default. The newest
  // `consumed_kept` consumed records are kept (0: whatever is written is kept).
  static absl::StatusOr<std::unique_ptr<DurableStore>> Open(const std::string& path,
                                                            rocksdb::Env* env = nullptr,
                                                            int64_t consumed_kept = 0);
  ~DurableStore();

  // Returns once the write is in the synced WAL (or failed; then the store is latched).
  // Blocks for at most one append and two WAL syncs (the one in flight and its own).
  absl::Status Commit(const Write& write);

  // Calls fn(key, serialized trajectory) for every stored trajectory in key order.
  absl::Status ForEach(const std::function<absl::Status(uint64_t, std::string_view)>& fn) const;
  // Calls fn(id, reason) for every consumed record still kept, oldest first.
  absl::Status ForEachConsumed(
      const std::function<absl::Status(std::string_view id, std::string_view reason)>& fn) const;
  absl::StatusOr<Meta> ReadMeta() const;
  // Read at every group commit and written with it, so the counts survive a restart.
  void SetMetaSource(std::function<Meta()> source);

  // The latched error, or OK.
  absl::Status status() const;
  int64_t syncs() const;    // WAL syncs
  int64_t batches() const;  // group-committed WriteBatches appended to the WAL
  int64_t records_written() const;
  const std::string& path() const { return path_; }
  // How the WAL's CRC32C is computed in this process ("sse4.2" or "table"; see crc32c.h).
  static const char* checksum_implementation();

  // Makes the next append (or WAL sync) fail as a storage error would (for the latch tests).
  void FailNextWriteForTesting();
  void FailNextSyncForTesting();
  // Runs just before each WAL sync, outside the lock: a test holds a sync in flight with it.
  void SetBeforeSyncForTesting(std::function<void()> hook);
  // Acknowledges batches without syncing the WAL: the bug the power-cut test must catch.
  void SkipSyncForTesting();

 private:
  struct Writer {
    const Write* write = nullptr;
    bool written = false;  // its group's append returned (status says how)
    uint64_t batch = 0;    // the group's number in append order
    absl::Status status;
  };

  // Leader of the write stage: appends every queued writer's request in one batch.
  void AppendGroupLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Until batch `batch` is in the synced WAL, syncing it here when no other sync is running.
  absl::Status AwaitSyncLocked(uint64_t batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LatchLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a full disk: asks RocksDB to resume writing; clears the latch when it does.
  void ResumeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  DurableStore(std::string path, rocksdb::DB* db, int64_t consumed_kept)
      : path_(std::move(path)), db_(db), consumed_kept_(consumed_kept) {}
  // Reads the first and next consumed sequence numbers (Open).
  absl::Status ReadConsumedRange();
  // Adds the queued writers' consumed records to `batch`, and the trim of the oldest.
  void AddConsumedLocked(const std::vector<const Write*>& writes, rocksdb::WriteBatch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  std::unique_ptr<rocksdb::DB> db_;
  const int64_t consumed_kept_;
  mutable absl::Mutex mu_;
  uint64_t next_consumed_ ABSL_GUARDED_BY(mu_) = 0;    // sequence of the next consumed record
  uint64_t consumed_first_ ABSL_GUARDED_BY(mu_) = 0;   // no record below this one is kept
  absl::CondVar writer_done_;  // a group was appended: the next leader may go
  absl::CondVar synced_;       // a sync finished (or failed)
  std::deque<Writer*> writers_ ABSL_GUARDED_BY(mu_);
  uint64_t appended_ ABSL_GUARDED_BY(mu_) = 0;        // batches whose append returned, in order
  uint64_t synced_through_ ABSL_GUARDED_BY(mu_) = 0;  // every batch up to this one is synced
  bool sync_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status latched_ ABSL_GUARDED_BY(mu_);
  std::function<Meta()> meta_source_ ABSL_GUARDED_BY(mu_);
  std::function<void()> before_sync_ ABSL_GUARDED_BY(mu_);
  int64_t syncs_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t records_ ABSL_GUARDED_BY(mu_) = 0;
  bool fail_next_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_next_sync_ ABSL_GUARDED_BY(mu_) = false;
  bool skip_sync_ ABSL_GUARDED_BY(mu_) = false;
};

std::string StorageKey(uint64_t key);
std::string ConsumedKey(uint64_t sequence);

// Adds tombstones for `keys` (sorted and deduplicated in place): one range deletion per run of
// consecutive keys, a point deletion for a key alone.
void AddDeletes(std::vector<uint64_t>& keys, rocksdb::WriteBatch* batch);

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_DURABLE_STORE_H_
