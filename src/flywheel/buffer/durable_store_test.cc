#include "flywheel/buffer/durable_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             StrCat("flywheel_durable_store_test_", name, "_", ::getpid());
  std::filesystem::remove_all(dir);
  return dir.string();
}

std::map<uint64_t, std::string> Contents(const DurableStore& store) {
  std::map<uint64_t, std::string> out;
  EXPECT_TRUE(store
                  .ForEach([&](uint64_t key, std::string_view value) {
                    out[key] = std::string(value);
                    return absl::OkStatus();
                  })
                  .ok());
  return out;
}

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
  const std::string path = TempDir("runs");
  {
    auto store = DurableStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Commit(Puts(1, 20)).ok());
    DurableStore::Write del;
    del.deletes = {9, 2, 3, 4, 7, 10, 11, 3, 15, 20};  // unsorted, one duplicate
    ASSERT_TRUE((*store)->Commit(del).ok());
    // A put after the deletes, inside a deleted run's span, is not hidden by it.
    ASSERT_TRUE((*store)->Commit(Puts(21, 22)).ok());
    const std::map<uint64_t, std::string> live = Contents(**store);
    std::vector<uint64_t> keys;
    for (const auto& [k, v] : live) keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<uint64_t>{1, 5, 6, 8, 12, 13, 14, 16, 17, 18, 19, 21, 22}));
    EXPECT_EQ(live.at(8), "v8");
  }
  auto reopened = DurableStore::Open(path);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ(Contents(**reopened).size(), 13u);
  reopened->reset();
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

}  // namespace
}  // namespace flywheel
