// The durable store under storage faults a SIGKILL cannot show: a power cut at random points of
// an insert stream (unsynced data lost, fault_injection_fs.h), a full disk and a failing fsync.
#include <gtest/gtest.h>
#include <rocksdb/env.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "flywheel/buffer/durable_store.h"
#include "flywheel/buffer/store_test_util.h"
#include "flywheel/buffer/fault_injection_fs.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             StrCat("flywheel_power_cut_test_", name, "_", ::getpid());
  std::filesystem::remove_all(dir);
  return dir.string();
}

std::string Value(uint64_t key) { return StrCat("trajectory-", key, std::string(key % 97, 'x')); }

// As power_cut_writer writes them.
DurableStore::Write Puts(uint64_t first, uint64_t count) {
  DurableStore::Write w;
  for (uint64_t k = first; k < first + count; ++k) {
    w.puts.emplace_back(k, std::make_shared<const std::string>(Value(k)));
  }
  return w;
}

using testing::StoreContents;

struct Trial {
  int64_t acknowledged = 0;
  int64_t lost = 0;     // acknowledged, but not there after the power came back
  int64_t corrupt = 0;  // there, with another value
  int64_t bytes_dropped = 0;
};

// power_cut_writer inserts from three threads until `cut_after` commits were acknowledged, then
// cuts the power (its disk keeps what was synced) and ends; the store is reopened on that disk.
Trial RunTrial(const std::string& path, uint64_t seed, bool skip_sync) {
  std::mt19937_64 rng(seed);
  const int64_t cut_after = std::uniform_int_distribution<int64_t>(1, 300)(rng);
  const std::string command = StrCat(FLYWHEEL_POWER_CUT_WRITER, " ", path, " ", cut_after, " ",
                                     seed, " ", skip_sync ? 1 : 0);
  FILE* child = ::popen(command.c_str(), "r");
  EXPECT_NE(child, nullptr) << command;
  if (child == nullptr) return {};
  std::set<uint64_t> acknowledged;
  Trial trial;
  bool was_cut = false;
  char line[256];
  while (std::fgets(line, sizeof(line), child) != nullptr) {
    unsigned long long a = 0, b = 0;
    if (std::sscanf(line, "ack %llu %llu", &a, &b) == 2) {
      for (uint64_t k = a; k < a + b; ++k) acknowledged.insert(k);
    } else if (std::sscanf(line, "cut %llu %llu", &a, &b) == 2) {
      was_cut = true;
      trial.bytes_dropped = static_cast<int64_t>(a);
    }
  }
  EXPECT_EQ(::pclose(child), 0) << command;
  EXPECT_TRUE(was_cut) << command;
  auto reopened = DurableStore::Open(path);
  EXPECT_TRUE(reopened.ok()) << reopened.status();
  if (!reopened.ok()) return trial;
  const std::map<uint64_t, std::string> there = StoreContents(**reopened);
  trial.acknowledged = static_cast<int64_t>(acknowledged.size());
  for (uint64_t k : acknowledged) {
    auto it = there.find(k);
    if (it == there.end()) {
      ++trial.lost;
    } else if (it->second != Value(k)) {
      ++trial.corrupt;
    }
  }
  return trial;
}

TEST(PowerCutTest, EveryAcknowledgedInsertSurvivesAPowerCutAtRandomPoints) {
  int64_t dropped_trials = 0, acknowledged = 0, bytes_dropped = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const std::string path = TempDir(StrCat("synced_", seed));
    const Trial t = RunTrial(path, seed, /*skip_sync=*/false);
    EXPECT_GT(t.acknowledged, 0) << "seed " << seed;
    EXPECT_EQ(t.lost, 0) << "seed " << seed << ": " << t.lost << " of " << t.acknowledged
                         << " acknowledged inserts lost";
    EXPECT_EQ(t.corrupt, 0) << "seed " << seed;
    if (t.bytes_dropped > 0) ++dropped_trials;
    acknowledged += t.acknowledged;
    bytes_dropped += t.bytes_dropped;
    std::filesystem::remove_all(path);
  }
  std::printf(
      "20 power cuts: %lld acknowledged inserts, all there after reopening; %lld cuts "
      "dropped unsynced data (%lld bytes)\n",
      static_cast<long long>(acknowledged), static_cast<long long>(dropped_trials),
      static_cast<long long>(bytes_dropped));
  // The cut must hit something unsynced in some trials, or the test proves nothing.
  EXPECT_GT(dropped_trials, 0);
}

// The same test with the WAL sync removed from the store: it must fail.
TEST(PowerCutTest, ATestWithoutTheSyncLosesAcknowledgedInserts) {
  int64_t lost = 0, acknowledged = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const std::string path = TempDir(StrCat("unsynced_", seed));
    const Trial t = RunTrial(path, seed, /*skip_sync=*/true);
    lost += t.lost;
    acknowledged += t.acknowledged;
    std::filesystem::remove_all(path);
  }
  std::printf("without the WAL sync, 5 power cuts lost %lld of %lld acknowledged inserts\n",
              static_cast<long long>(lost), static_cast<long long>(acknowledged));
  EXPECT_GT(lost, 0) << "a store that never syncs its WAL passed the power-cut test";
}

TEST(PowerCutTest, AFullDiskFailsInsertsClearlyAndTheStoreResumesWhenSpaceReturns) {
  const std::string path = TempDir("full");
  auto fs = std::make_shared<FaultInjectionFileSystem>();
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  {
    auto store = DurableStore::Open(path, env.get());
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Commit(Puts(1, 10)).ok());
    fs->SetDiskFull(true);
    const absl::Status full = (*store)->Commit(Puts(11, 5));
    EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
    EXPECT_NE(full.message().find("free space"), std::string::npos) << full;
    EXPECT_FALSE((*store)->Commit(Puts(16, 5)).ok());  // still full
    fs->SetDiskFull(false);
    const absl::Status resumed = (*store)->Commit(Puts(21, 5));
    EXPECT_TRUE(resumed.ok()) << resumed;
    EXPECT_TRUE((*store)->status().ok()) << (*store)->status();
  }
  ASSERT_TRUE(fs->DropUnsyncedData().ok());  // and then the power goes
  auto reopened = DurableStore::Open(path, env.get());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  const std::map<uint64_t, std::string> there = StoreContents(**reopened);
  for (uint64_t k : {1, 10, 21, 25}) EXPECT_TRUE(there.count(k)) << "acknowledged key " << k;
  std::filesystem::remove_all(path);
}

// After a failed fsync the kernel may have dropped the pages it could not write: the store
// acknowledges nothing more until it is reopened, and what it acknowledged before survives.
TEST(PowerCutTest, AFailedFsyncLatchesTheStoreAndKeepsWhatWasAcknowledged) {
  const std::string path = TempDir("fsync");
  auto fs = std::make_shared<FaultInjectionFileSystem>();
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  {
    auto store = DurableStore::Open(path, env.get());
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Commit(Puts(1, 10)).ok());
    fs->SetSyncFails(true);
    const absl::Status failed = (*store)->Commit(Puts(11, 5));
    EXPECT_TRUE(absl::IsDataLoss(failed)) << failed;
    fs->SetSyncFails(false);
    const absl::Status after = (*store)->Commit(Puts(16, 5));
    EXPECT_FALSE(after.ok());
    EXPECT_NE(after.message().find("restart"), std::string::npos) << after;
    fs->CutPower();
  }
  ASSERT_TRUE(fs->DropUnsyncedData().ok());
  fs->RestorePower();
  auto reopened = DurableStore::Open(path, env.get());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  const std::map<uint64_t, std::string> there = StoreContents(**reopened);
  for (uint64_t k = 1; k <= 10; ++k) EXPECT_TRUE(there.count(k)) << "acknowledged key " << k;
  EXPECT_TRUE((*reopened)->Commit(Puts(30, 2)).ok());
  std::filesystem::remove_all(path);
}

}  // namespace
}  // namespace flywheel
