#include "flywheel/tokenizer/word_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

using ::testing::ElementsAre;

TEST(WordCacheTest, MissThenHit) {
  WordCache cache(100);
  std::vector<int64_t> ids = {7};
  EXPECT_FALSE(cache.Lookup("hello", &ids));
  EXPECT_THAT(ids, ElementsAre(7));
  const std::vector<int64_t> hello = {1, 2, 3};
  cache.Insert("hello", hello);
  EXPECT_TRUE(cache.Lookup("hello", &ids));
  EXPECT_THAT(ids, ElementsAre(7, 1, 2, 3));  // appended
  EXPECT_EQ(cache.size(), 1u);
  cache.Clear();
  EXPECT_FALSE(cache.Lookup("hello", &ids));
}

TEST(WordCacheTest, BoundedAndFirstComeStays) {
  WordCache cache(32);
  const std::vector<int64_t> one = {1};
  for (int i = 0; i < 1000; ++i) cache.Insert(StrCat("w", i), one);
  EXPECT_LE(cache.size(), cache.capacity());
  EXPECT_GE(cache.size(), cache.capacity() / 2);  // the shards fill up, roughly evenly
  std::vector<int64_t> ids;
  EXPECT_TRUE(cache.Lookup("w0", &ids));  // the first piece of its shard is still there
}

TEST(WordCacheTest, LongPiecesAndZeroCapacityAreNotCached) {
  WordCache cache(100);
  const std::vector<int64_t> one = {1};
  const std::string long_piece(WordCache::kMaxPieceBytes, 'a');
  cache.Insert(long_piece, one);
  std::vector<int64_t> ids;
  EXPECT_FALSE(cache.Lookup(long_piece, &ids));
  WordCache off(0);
  off.Insert("a", one);
  EXPECT_FALSE(off.Lookup("a", &ids));
}

TEST(WordCacheTest, ThreadsShareIt) {
  WordCache cache(1 << 14);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5000; ++i) {
        const std::string piece = StrCat("p", (i * 7 + t) % 3000);
        const int64_t id = (i * 7 + t) % 3000;
        std::vector<int64_t> ids;
        if (cache.Lookup(piece, &ids)) {
          if (ids.size() != 1 || ids[0] != id) ++wrong;
        } else {
          const std::vector<int64_t> value = {id};
          cache.Insert(piece, value);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(cache.size(), 3000u);
}

}  // namespace
}  // namespace flywheel
