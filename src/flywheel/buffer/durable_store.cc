#include "flywheel/buffer/durable_store.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>

#include "flywheel/buffer/crc32c.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

constexpr char kMetaKey[] = "m";

absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::DataLossError(StrCat("buffer store: ", what, ": ", s.ToString()));
}

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

absl::StatusOr<std::unique_ptr<DurableStore>> DurableStore::Open(const std::string& path) {
  rocksdb::Options options;
  options.create_if_missing = true;
  // Inserts are small and written once; a larger memtable means fewer flushes under load.
  options.write_buffer_size = 64 << 20;
  options.IncreaseParallelism(2);
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &db);
  if (!s.ok()) {
    return absl::UnavailableError(
        StrCat("buffer store: cannot open RocksDB at ", path, " (buffer.path): ", s.ToString()));
  }
  return std::unique_ptr<DurableStore>(new DurableStore(path, db));
}

DurableStore::~DurableStore() {
  if (db_ != nullptr) {
    db_->FlushWAL(/*sync=*/true).PermitUncheckedError();
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
  if (!latched_.ok()) return latched_;
  writers_.push_back(&me);
  while (!me.done && writers_.front() != &me) writer_done_.Wait(&mu_);
  if (me.done) return me.status;
  if (!latched_.ok()) {  // a failed batch ahead of this one latched the store
    writers_.pop_front();
    writer_done_.SignalAll();
    return latched_;
  }

  // Leader: merge everything queued behind it into one synced batch.
  // Sized up front: growing the batch by doubling copies every record written so far again.
  size_t bytes = 64;
  for (Writer* w : writers_) {
    for (const auto& put : w->write->puts) bytes += put.second->size() + 24;
    bytes += 24 * w->write->deletes.size();
  }
  rocksdb::WriteBatch batch(bytes);
  Writer* last = &me;
  int64_t records = 0;
  std::vector<uint64_t> deletes;
  for (Writer* w : writers_) {
    for (const auto& [key, value] : w->write->puts) {
      batch.Put(StorageKey(key), rocksdb::Slice(value->data(), value->size()));
      ++records;
    }
    deletes.insert(deletes.end(), w->write->deletes.begin(), w->write->deletes.end());
    last = w;
  }
  AddDeletes(deletes, &batch);
  std::function<Meta()> meta_source = meta_source_;
  bool fail = fail_next_;
  fail_next_ = false;
  absl::Status status;
  {
    mu_.Unlock();
    if (meta_source) batch.Put(kMetaKey, EncodeMeta(meta_source()));
    rocksdb::WriteOptions options;
    options.sync = true;
    status = fail ? absl::DataLossError("buffer store: injected write failure")
                  : FromRocks(db_->Write(options, &batch), "synced write");
    mu_.Lock();
  }
  ++syncs_;
  records_ += records;
  if (!status.ok()) {
    latched_ = absl::DataLossError(
        StrCat(status.message(), " (store ", path_,
               " is now read-only for this process: later writes fail; restart to recover)"));
  }
  while (true) {
    Writer* w = writers_.front();
    writers_.pop_front();
    w->status = status;
    w->done = true;
    if (w == last) break;
  }
  writer_done_.SignalAll();
  return status;
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

int64_t DurableStore::records_written() const {
  absl::MutexLock lock(&mu_);
  return records_;
}

void DurableStore::FailNextWriteForTesting() {
  absl::MutexLock lock(&mu_);
  fail_next_ = true;
}

}  // namespace flywheel
