#include "flywheel/buffer/durable_store.h"

#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>

#include "flywheel/buffer/crc32c.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

constexpr char kMetaKey[] = "m";

// A full disk is ResourceExhausted (the store recovers once space is freed); every other
// storage error is DataLoss (the store stays read-only until the process restarts).
absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  if (s.IsNoSpace()) {
    return absl::ResourceExhaustedError(
        StrCat("buffer store: ", what, ": ", s.ToString(), " (free space on the buffer's disk)"));
  }
  return absl::DataLossError(StrCat("buffer store: ", what, ": ", s.ToString()));
}

// RocksDB would recover from a full disk by itself, polling the free space every few seconds;
// the store resumes it from the next write instead (ResumeLocked), so that recovery follows the
// disk as soon as a write can succeed.
class ResumeOnNextWrite : public rocksdb::EventListener {
 public:
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }
};

// The consumed records' keys ("c" + 8 bytes) sort below the items' ("t" + 8 bytes) and the
// meta key ("m"): every range stays within its prefix.
constexpr char kConsumedPrefix = 'c';

uint64_t DecodeKey(std::string_view k) {
  uint64_t v = 0;
  for (size_t i = 1; i < k.size() && i <= 8; ++i) v = (v << 8) | static_cast<uint8_t>(k[i]);
  return v;
}

std::string EncodeMeta(const DurableStore::Meta& m) {
  return StrCat(m.inserts, " ", m.samples, " ", m.learner_version);
}

}  // namespace

void AddDeletes(std::vector<uint64_t>& keys, rocksdb::WriteBatch* batch) {
  // A queue consumes keys in insertion order, so what one commit deletes is mostly runs of
  // consecutive keys. One range tombstone per run keeps the memtable's skip list receiving
  // puts in key order only (RocksDB's sequential-insert fast path) instead of a point
  // tombstone in its middle per consumed item. Only keys in `keys` are covered: a run is
  // consecutive integers, every one of them deleted.
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  for (size_t i = 0; i < keys.size();) {
    size_t j = i + 1;
    while (j < keys.size() && keys[j - 1] != UINT64_MAX && keys[j] == keys[j - 1] + 1) ++j;
    if (j - i == 1) {
      batch->Delete(StorageKey(keys[i]));
    } else {
      batch->DeleteRange(StorageKey(keys[i]), StorageKey(keys[j - 1] + 1));
    }
    i = j;
  }
}

std::string StorageKey(uint64_t key) {
  std::string k(9, '\0');
  k[0] = 't';
  for (int i = 0; i < 8; ++i) k[8 - i] = static_cast<char>((key >> (8 * i)) & 0xff);
  return k;
}

std::string ConsumedKey(uint64_t sequence) {
  std::string k = StorageKey(sequence);
  k[0] = kConsumedPrefix;
  return k;
}

absl::StatusOr<std::unique_ptr<DurableStore>> DurableStore::Open(const std::string& path,
                                                                  rocksdb::Env* env,
                                                                  int64_t consumed_kept) {
  rocksdb::Options options;
  if (env != nullptr) options.env = env;
  options.listeners.push_back(std::make_shared<ResumeOnNextWrite>());
  options.create_if_missing = true;
  // Inserts are small and written once; a larger memtable means fewer flushes under load.
  options.write_buffer_size = 64 << 20;
  options.IncreaseParallelism(2);
  // Most records are deleted within seconds; what a flush writes (the items still queued) is
  // compacted away soon after. Compressing it on flush and decompressing it to compact cost
  // CPU per byte for nothing.
  options.compression = rocksdb::kNoCompression;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &db);
  if (!s.ok()) {
    return absl::UnavailableError(
        StrCat("buffer store: cannot open RocksDB at ", path, " (buffer.path): ", s.ToString()));
  }
  std::unique_ptr<DurableStore> store(new DurableStore(path, db, consumed_kept));
  if (absl::Status s = store->ReadConsumedRange(); !s.ok()) return s;
  return store;
}

absl::Status DurableStore::ReadConsumedRange() {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const std::string prefix(1, kConsumedPrefix);
  uint64_t first = 0;
  uint64_t next = 0;
  it->Seek(prefix);
  if (it->Valid() && it->key().starts_with(prefix)) {
    first = DecodeKey(std::string_view(it->key().data(), it->key().size()));
    it->SeekForPrev(ConsumedKey(UINT64_MAX));
    if (it->Valid() && it->key().starts_with(prefix)) {
      next = DecodeKey(std::string_view(it->key().data(), it->key().size())) + 1;
    }
  }
  if (absl::Status s = FromRocks(it->status(), "reading the consumed records"); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  consumed_first_ = first;
  next_consumed_ = std::max(next, first);
  return absl::OkStatus();
}

void DurableStore::AddConsumedLocked(const std::vector<const Write*>& writes,
                                     rocksdb::WriteBatch* batch) {
  bool any = false;
  for (const Write* w : writes) {
    for (const Consumed& c : w->consumed) {
      batch->Put(ConsumedKey(next_consumed_++), StrCat(c.reason, "\t", c.id));
      any = true;
    }
  }
  if (!any || consumed_kept_ <= 0) return;
  // Trim in steps of an eighth of what is kept, so that a stream of small batches does not add
  // a range tombstone each: between consumed_kept and 1.125 x consumed_kept records remain.
  const uint64_t kept = static_cast<uint64_t>(consumed_kept_);
  if (next_consumed_ - consumed_first_ > kept + std::max<uint64_t>(1, kept / 8)) {
    const uint64_t new_first = next_consumed_ - kept;
    batch->DeleteRange(ConsumedKey(consumed_first_), ConsumedKey(new_first));
    consumed_first_ = new_first;
  }
}

DurableStore::~DurableStore() {
  if (db_ != nullptr) {
    // After a storage error RocksDB's WAL writer must not be synced again (its debug builds,
    // Debian's among them, abort on it); what was acknowledged is synced already.
    if (status().ok()) db_->FlushWAL(/*sync=*/true).PermitUncheckedError();
    db_->Close().PermitUncheckedError();
  }
}

void DurableStore::SetMetaSource(std::function<Meta()> source) {
  absl::MutexLock lock(&mu_);
  meta_source_ = std::move(source);
}

absl::Status DurableStore::Commit(const Write& write) {
  Writer me;
  me.write = &write;
  absl::MutexLock lock(&mu_);
  if (absl::IsResourceExhausted(latched_)) ResumeLocked();
  if (!latched_.ok()) return latched_;
  writers_.push_back(&me);
  while (!me.written && writers_.front() != &me) writer_done_.Wait(&mu_);
  if (!me.written) {
    if (!latched_.ok()) {  // a failed batch ahead of this one latched the store
      writers_.pop_front();
      writer_done_.SignalAll();
      return latched_;
    }
    AppendGroupLocked();
  }
  if (!me.status.ok()) return me.status;
  return AwaitSyncLocked(me.batch);
}

void DurableStore::AppendGroupLocked() {
  // Merge everything queued (this leader first) into one batch.
  // Sized up front: growing the batch by doubling copies every record written so far again.
  size_t bytes = 64;
  for (Writer* w : writers_) {
    for (const auto& put : w->write->puts) bytes += put.second->size() + 24;
    bytes += 24 * w->write->deletes.size();
    for (const Consumed& c : w->write->consumed) bytes += c.id.size() + c.reason.size() + 24;
  }
  rocksdb::WriteBatch batch(bytes);
  Writer* last = writers_.front();
  int64_t records = 0;
  std::vector<uint64_t> deletes;
  std::vector<const Write*> writes;
  writes.reserve(writers_.size());
  for (Writer* w : writers_) {
    for (const auto& [key, value] : w->write->puts) {
      batch.Put(StorageKey(key), rocksdb::Slice(value->data(), value->size()));
      ++records;
    }
    deletes.insert(deletes.end(), w->write->deletes.begin(), w->write->deletes.end());
    writes.push_back(w->write);
    last = w;
  }
  AddDeletes(deletes, &batch);
  AddConsumedLocked(writes, &batch);
  std::function<Meta()> meta_source = meta_source_;
  const bool fail = fail_next_;
  fail_next_ = false;
  absl::Status status;
  {
    // Writers that arrive meanwhile queue behind `last` and form the next group; the leader
    // stays at the front, so no second append starts before this one returned.
    mu_.Unlock();
    if (meta_source) batch.Put(kMetaKey, EncodeMeta(meta_source()));
    rocksdb::WriteOptions options;
    options.sync = false;  // synced by AwaitSyncLocked, overlapping the next group's append
    status = fail ? absl::DataLossError("buffer store: injected write failure")
                  : FromRocks(db_->Write(options, &batch), "WAL append");
    mu_.Lock();
  }
  // Numbered only once the append returned: a sync that starts after this covers the batch.
  const uint64_t number = ++appended_;
  records_ += records;
  if (!status.ok()) LatchLocked(status);
  while (true) {
    Writer* w = writers_.front();
    writers_.pop_front();
    w->status = status;
    w->batch = number;
    w->written = true;
    if (w == last) break;
  }
  writer_done_.SignalAll();
}

absl::Status DurableStore::AwaitSyncLocked(uint64_t batch) {
  while (synced_through_ < batch) {
    if (!latched_.ok()) return latched_;  // appended, but its sync failed: not acknowledged
    if (sync_in_flight_) {
      // The sync in flight may have started before this batch was appended: wait for it to
      // finish, then look again (this thread may then run the next sync).
      synced_.Wait(&mu_);
      continue;
    }
    // Everything appended so far: those appends returned before this sync starts, so the
    // sync covers their records (SyncWAL syncs every live WAL file up to the current one).
    const uint64_t target = appended_;
    sync_in_flight_ = true;
    std::function<void()> hook = before_sync_;
    const bool fail = fail_next_sync_;
    fail_next_sync_ = false;
    const bool skip = skip_sync_;
    mu_.Unlock();
    if (hook) hook();
    const absl::Status status = fail   ? absl::DataLossError("buffer store: injected sync failure")
                                : skip ? absl::OkStatus()
                                       : FromRocks(db_->SyncWAL(), "WAL sync");
    mu_.Lock();
    sync_in_flight_ = false;
    ++syncs_;
    if (status.ok()) {
      synced_through_ = std::max(synced_through_, target);
    } else {
      LatchLocked(status);
    }
    synced_.SignalAll();
  }
  return absl::OkStatus();
}

void DurableStore::ResumeLocked() {
  if (sync_in_flight_ || !writers_.empty()) return;  // a writer ahead of this one will try
  mu_.Unlock();
  // RocksDB stopped writing at the error; Resume flushes what it holds and opens a new WAL
  // once the disk takes writes again. Nothing that failed was acknowledged, so nothing
  // acknowledged is lost by going on.
  const rocksdb::Status s = db_->Resume();
  mu_.Lock();
  if (s.ok() && absl::IsResourceExhausted(latched_)) latched_ = absl::OkStatus();
}

void DurableStore::LatchLocked(const absl::Status& status) {
  if (!latched_.ok()) return;
  if (absl::IsResourceExhausted(status)) {
    latched_ = absl::ResourceExhaustedError(
        StrCat(status.message(), " (store ", path_,
               " refuses writes until there is space again; the next write retries)"));
    return;
  }
  latched_ = absl::DataLossError(
      StrCat(status.message(), " (store ", path_,
             " is now read-only for this process: later writes fail; restart to recover)"));
}

absl::Status DurableStore::ForEach(
    const std::function<absl::Status(uint64_t, std::string_view)>& fn) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("t"); it->Valid() && it->key().starts_with("t"); it->Next()) {
    const std::string_view key(it->key().data(), it->key().size());
    if (absl::Status s =
            fn(DecodeKey(key), std::string_view(it->value().data(), it->value().size()));
        !s.ok()) {
      return s;
    }
  }
  return FromRocks(it->status(), "recovery scan");
}

absl::Status DurableStore::ForEachConsumed(
    const std::function<absl::Status(std::string_view id, std::string_view reason)>& fn) const {
  const std::string prefix(1, kConsumedPrefix);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    const std::string_view value(it->value().data(), it->value().size());
    const size_t tab = value.find('\t');
    if (tab == std::string_view::npos) {
      return absl::DataLossError(StrCat("buffer store ", path_, ": consumed record ",
                                        DecodeKey(std::string_view(it->key().data(), 9)),
                                        " is not \"reason<TAB>id\""));
    }
    if (absl::Status s = fn(value.substr(tab + 1), value.substr(0, tab)); !s.ok()) return s;
  }
  return FromRocks(it->status(), "reading the consumed records");
}

absl::StatusOr<DurableStore::Meta> DurableStore::ReadMeta() const {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kMetaKey, &value);
  Meta meta;
  if (s.IsNotFound()) return meta;
  if (!s.ok()) return FromRocks(s, "reading meta");
  if (std::sscanf(value.c_str(), "%ld %ld %ld", &meta.inserts, &meta.samples,
                  &meta.learner_version) != 3) {
    return absl::DataLossError(
        StrCat("buffer store ", path_, ": corrupt meta record \"", value, "\""));
  }
  return meta;
}

absl::Status DurableStore::status() const {
  absl::MutexLock lock(&mu_);
  return latched_;
}

const char* DurableStore::checksum_implementation() { return Crc32cImplementation(); }

int64_t DurableStore::syncs() const {
  absl::MutexLock lock(&mu_);
  return syncs_;
}

int64_t DurableStore::batches() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(appended_);
}

int64_t DurableStore::records_written() const {
  absl::MutexLock lock(&mu_);
  return records_;
}

void DurableStore::FailNextWriteForTesting() {
  absl::MutexLock lock(&mu_);
  fail_next_ = true;
}

void DurableStore::FailNextSyncForTesting() {
  absl::MutexLock lock(&mu_);
  fail_next_sync_ = true;
}

void DurableStore::SetBeforeSyncForTesting(std::function<void()> hook) {
  absl::MutexLock lock(&mu_);
  before_sync_ = std::move(hook);
}

void DurableStore::SkipSyncForTesting() {
  absl::MutexLock lock(&mu_);
  skip_sync_ = true;
}

}  // namespace flywheel
