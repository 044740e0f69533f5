// The durable log of a buffer in durable mode: RocksDB with a synced write-ahead log.
//
//   producer threads ─┐  Commit(puts, deletes)
//   consumer thread  ─┼─▶ writers_ queue ─▶ the front writer (leader) merges every queued
//   ...              ─┘                     request into one WriteBatch, writes it with
//                                           sync = true, then wakes all of them
//
// This is group commit as in LevelDB's DBImpl::Write: one fsync acknowledges many concurrent
// inserts, so throughput stays high while every acknowledged insert is in the synced WAL.
// Keys: "t" + big-endian storage key -> serialized flywheel.v1.Trajectory; "m" -> Meta.
// Deleted runs of consecutive keys are written as range tombstones (see AddDeletes).
// A failed write is latched: every later Commit fails with the same error (LevelDB bg_error_).
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

  struct Write {
    std::vector<std::pair<uint64_t, std::shared_ptr<const std::string>>> puts;
    std::vector<uint64_t> deletes;
  };

  static absl::StatusOr<std::unique_ptr<DurableStore>> Open(const std::string& path);
  ~DurableStore();

  // Returns once the write is in the synced WAL (or failed; then the store is latched).
  absl::Status Commit(const Write& write);

  // Calls fn(key, serialized trajectory) for every stored trajectory in key order.
  absl::Status ForEach(const std::function<absl::Status(uint64_t, std::string_view)>& fn) const;
  absl::StatusOr<Meta> ReadMeta() const;
  // Read at every group commit and written with it, so the counts survive a restart.
  void SetMetaSource(std::function<Meta()> source);

  // The latched error, or OK.
  absl::Status status() const;
  int64_t syncs() const;
  int64_t records_written() const;
  const std::string& path() const { return path_; }
  // How the WAL's CRC32C is computed in this process ("sse4.2" or "table"; see crc32c.h).
  static const char* checksum_implementation();

  // Makes the next write fail as a storage error would (for the latch test).
  void FailNextWriteForTesting();

 private:
  struct Writer {
    const Write* write = nullptr;
    bool done = false;
    absl::Status status;
  };

  DurableStore(std::string path, rocksdb::DB* db) : path_(std::move(path)), db_(db) {}

  const std::string path_;
  std::unique_ptr<rocksdb::DB> db_;
  mutable absl::Mutex mu_;
  absl::CondVar writer_done_;
  std::deque<Writer*> writers_ ABSL_GUARDED_BY(mu_);
  absl::Status latched_ ABSL_GUARDED_BY(mu_);
  std::function<Meta()> meta_source_ ABSL_GUARDED_BY(mu_);
  int64_t syncs_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t records_ ABSL_GUARDED_BY(mu_) = 0;
  bool fail_next_ ABSL_GUARDED_BY(mu_) = false;
};

std::string StorageKey(uint64_t key);

// Adds tombstones for `keys` (sorted and deduplicated in place): one range deletion per run of
// consecutive keys, a point deletion for a key alone.
void AddDeletes(std::vector<uint64_t>& keys, rocksdb::WriteBatch* batch);

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_DURABLE_STORE_H_
