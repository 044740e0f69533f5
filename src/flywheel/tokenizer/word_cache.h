// A bounded cache from a pre-tokenized piece (raw bytes) to its BPE ids, shared by every thread
// that encodes with one tokenizer. Natural text repeats a small set of words, so most pieces
// skip the merge loop (HF tokenizers' BPE keeps a cache for the same reason).
//
//   Lookup / Insert ──hash──▶ shard k ─┬─ mu (reader lock for Lookup, writer for Insert)
//                                      └─ map: piece -> ids  (GUARDED_BY mu)
//
// Sixteen shards, each with its own lock, so threads encoding different text rarely meet. The
// bound is per shard (capacity / 16). A full shard takes no new pieces, as HF's cache does: the
// words seen first (system prompts, the task's vocabulary) stay, and no thread pays for
// evictions. Pieces of 256 bytes or more are not cached (HF's MAX_LENGTH): they rarely repeat.
#ifndef FLYWHEEL_TOKENIZER_WORD_CACHE_H_
#define FLYWHEEL_TOKENIZER_WORD_CACHE_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/synchronization/mutex.h"

namespace flywheel {

class WordCache {
 public:
  static constexpr size_t kMaxPieceBytes = 256;

  // `capacity` pieces in all; 0 disables the cache.
  explicit WordCache(size_t capacity);
  WordCache(const WordCache&) = delete;
  WordCache& operator=(const WordCache&) = delete;

  // On a hit appends the ids of `piece` to `ids` and returns true.
  bool Lookup(std::string_view piece, std::vector<int64_t>* ids) const;
  // Remembers the ids of `piece` unless its shard is full or the piece is too long.
  void Insert(std::string_view piece, std::span<const int64_t> ids);

  size_t capacity() const { return shard_capacity_ * kShards; }
  size_t size() const;  // pieces cached now (takes every shard's lock)
  void Clear();

 private:
  static constexpr size_t kShards = 16;
  using Ids = absl::InlinedVector<int32_t, 6>;
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<std::string, Ids> map ABSL_GUARDED_BY(mu);
  };
  Shard& ShardOf(std::string_view piece) const;

  const size_t shard_capacity_;
  mutable std::array<Shard, kShards> shards_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_TOKENIZER_WORD_CACHE_H_
