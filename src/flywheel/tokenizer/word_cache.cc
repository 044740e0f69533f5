#include "flywheel/tokenizer/word_cache.h"

#include "absl/hash/hash.h"
#include "flywheel/core/strings.h"

namespace flywheel {

WordCache::WordCache(size_t capacity)
    : shard_capacity_(capacity == 0 ? 0 : (capacity + kShards - 1) / kShards) {}

WordCache::Shard& WordCache::ShardOf(std::string_view piece) const {
  // The shard takes the top bits of the hash, which the map's own probing leaves unused.
  const size_t h = absl::HashOf(ToAbsl(piece));
  return shards_[(h >> 56) % kShards];
}

bool WordCache::Lookup(std::string_view piece, std::vector<int64_t>* ids) const {
  if (shard_capacity_ == 0 || piece.size() >= kMaxPieceBytes) return false;
  Shard& shard = ShardOf(piece);
  absl::ReaderMutexLock lock(&shard.mu);
  auto it = shard.map.find(ToAbsl(piece));
  if (it == shard.map.end()) return false;
  ids->insert(ids->end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::Insert(std::string_view piece, std::span<const int64_t> ids) {
  if (shard_capacity_ == 0 || piece.size() >= kMaxPieceBytes) return;
  Shard& shard = ShardOf(piece);
  absl::MutexLock lock(&shard.mu);
  if (shard.map.size() >= shard_capacity_) return;
  shard.map.try_emplace(std::string(piece), Ids(ids.begin(), ids.end()));
}

size_t WordCache::size() const {
  size_t total = 0;
  for (Shard& shard : shards_) {
    absl::ReaderMutexLock lock(&shard.mu);
    total += shard.map.size();
  }
  return total;
}

void WordCache::Clear() {
  for (Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    shard.map.clear();
  }
}

}  // namespace flywheel
