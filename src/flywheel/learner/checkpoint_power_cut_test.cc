// The checkpoint writer under storage faults a SIGKILL cannot show (docs/reliability.md): a power
// cut at random points of a stream of saves, a full disk and a failing fsync, on a
// FaultInjectionFileSystem that keeps only what was synced. The promise: a save that returned is
// complete after the power comes back, and until a save returns the previous checkpoint stays the
// newest complete one.
#include <gtest/gtest.h>
#include <rocksdb/file_system.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "flywheel/buffer/fault_injection_fs.h"
#include "flywheel/core/strings.h"
#include "flywheel/learner/checkpoint.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;

std::string MakeTempDir() {
  std::string pattern = (fs::temp_directory_path() / "flywheel-ckpt-cut-XXXXXX").string();
  return mkdtemp(pattern.data());
}

// The bytes of part `i` of checkpoint `step`: a size and content that depend on both.
std::string PartBytes(int64_t step, int i) {
  std::mt19937_64 rng(static_cast<uint64_t>(step) * 131 + static_cast<uint64_t>(i));
  std::string bytes(std::uniform_int_distribution<size_t>(1, 96 << 10)(rng), '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

constexpr int kParts = 3;

absl::Status FromIo(const rocksdb::IOStatus& s) {
  if (s.ok()) return absl::OkStatus();
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(s.ToString());
  return absl::InternalError(s.ToString());
}

// Writes the parts through `fs` without syncing them, as the learner's writers do: Save must.
CheckpointManager::Writer PartsWriter(rocksdb::FileSystem* fs, int64_t step) {
  return [fs, step](const std::string& dir) -> absl::Status {
    for (int i = 0; i < kParts; ++i) {
      std::unique_ptr<rocksdb::FSWritableFile> file;
      const std::string path = StrCat(dir, "/part-", i);
      if (absl::Status s = FromIo(fs->NewWritableFile(path, {}, &file, nullptr)); !s.ok()) {
        return s;
      }
      if (absl::Status s = FromIo(file->Append(PartBytes(step, i), {}, nullptr)); !s.ok()) {
        return s;
      }
      if (absl::Status s = FromIo(file->Close({}, nullptr)); !s.ok()) return s;
    }
    return absl::OkStatus();
  };
}

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Whether the complete checkpoint `step` holds exactly what its writer wrote.
bool Intact(const CheckpointManager& manager, int64_t step) {
  const fs::path dir = manager.PathFor(step);
  if (ReadAll(dir / CheckpointManager::kDoneMarker) != StrCat(step, "\n")) return false;
  for (int i = 0; i < kParts; ++i) {
    if (ReadAll(dir / StrCat("part-", i)) != PartBytes(step, i)) return false;
  }
  return true;
}

struct Trial {
  int64_t acknowledged = -1;  // the last step whose Save returned OK
  int64_t newest = -1;        // the newest complete checkpoint after the power came back
  bool cut_mid_save = false;  // a Save failed because of the cut
  bool newest_intact = false;
  bool older_intact = true;
  int64_t files_dropped = 0;
  int64_t bytes_dropped = 0;
};

// Saves steps 1, 2, … every one through the fault-injecting file system until the power is cut
// at a random moment, then brings it back and reads the directory as a restarted learner would.
Trial RunTrial(const std::string& dir, uint64_t seed, bool sync) {
  auto fi = std::make_shared<FaultInjectionFileSystem>();
  CheckpointManager manager({.directory = dir, .keep_last = 2, .file_system = fi, .sync = sync});
  std::mt19937_64 rng(seed);
  const auto delay = std::chrono::microseconds(std::uniform_int_distribution<int>(0, 40000)(rng));
  std::atomic<bool> cut{false};
  std::thread cutter([&] {
    std::this_thread::sleep_for(delay);
    fi->CutPower();
    cut = true;
  });
  Trial trial;
  for (int64_t step = 1; !cut; ++step) {
    absl::StatusOr<std::string> saved = manager.Save(step, PartsWriter(fi.get(), step));
    if (saved.ok()) {
      trial.acknowledged = step;
    } else {
      trial.cut_mid_save = true;
      break;
    }
  }
  cutter.join();
  EXPECT_TRUE(fi->DropUnsyncedData().ok());
  trial.files_dropped = fi->files_dropped();
  trial.bytes_dropped = fi->bytes_dropped();
  fi->RestorePower();

  CheckpointManager restarted({.directory = dir, .keep_last = 2});
  absl::StatusOr<std::vector<int64_t>> steps = restarted.CompleteSteps();
  EXPECT_TRUE(steps.ok()) << steps.status();
  if (!steps.ok() || steps->empty()) return trial;
  trial.newest = steps->back();
  trial.newest_intact = Intact(restarted, trial.newest);
  for (int64_t step : *steps) trial.older_intact = trial.older_intact && Intact(restarted, step);
  return trial;
}

TEST(CheckpointPowerCutTest, ASaveThatReturnedSurvivesAndTheNewestCompleteOneIsWhole) {
  int mid_save = 0, dropped = 0, saves = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const std::string dir = MakeTempDir();
    const Trial t = RunTrial(dir, seed, /*sync=*/true);
    SCOPED_TRACE(StrCat("seed ", seed, ": acknowledged ", t.acknowledged, ", newest ", t.newest));
    if (t.acknowledged > 0) {
      // The last save that returned is there; at most the one the cut interrupted is newer.
      EXPECT_GE(t.newest, t.acknowledged);
      EXPECT_LE(t.newest, t.acknowledged + 1);
    }
    if (t.newest > 0) {
      EXPECT_TRUE(t.newest_intact);
      EXPECT_TRUE(t.older_intact);
    }
    mid_save += t.cut_mid_save ? 1 : 0;
    dropped += t.files_dropped + t.bytes_dropped > 0 ? 1 : 0;
    saves += static_cast<int>(std::max<int64_t>(t.acknowledged, 0));
    fs::remove_all(dir);
  }
  std::printf("40 power cuts over %d saves: %d cut a save in progress, %d dropped unsynced data\n",
              saves, mid_save, dropped);
  // The cuts must land inside saves and find unsynced data, or the test proves nothing.
  EXPECT_GT(mid_save, 10);
  EXPECT_GT(dropped, 10);
}

// Without its fsyncs the writer must fail the same test: a save that returned is lost.
TEST(CheckpointPowerCutTest, AWriterThatDoesNotSyncLosesReturnedSaves) {
  int lost = 0, trials = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const std::string dir = MakeTempDir();
    const Trial t = RunTrial(dir, seed, /*sync=*/false);
    if (t.acknowledged > 0) {
      ++trials;
      if (t.newest < t.acknowledged || !t.newest_intact) ++lost;
    }
    fs::remove_all(dir);
  }
  ASSERT_GT(trials, 0);
  EXPECT_EQ(lost, trials) << "a checkpoint writer without fsync passed the power-cut test";
}

class CheckpointStorageFaultTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir(); }
  void TearDown() override { fs::remove_all(dir_); }

  // Only the complete checkpoints and nothing temporary.
  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string dir_;
  std::shared_ptr<FaultInjectionFileSystem> fi_ = std::make_shared<FaultInjectionFileSystem>();
};

TEST_F(CheckpointStorageFaultTest, AFullDiskFailsTheSaveAndKeepsThePreviousCheckpoint) {
  CheckpointManager manager({.directory = dir_, .keep_last = 2, .file_system = fi_});
  ASSERT_TRUE(manager.Save(1, PartsWriter(fi_.get(), 1)).ok());
  fi_->SetDiskFull(true);
  // The parts cannot be written: the writer's error, with its step.
  absl::StatusOr<std::string> saved = manager.Save(2, PartsWriter(fi_.get(), 2));
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kResourceExhausted) << saved.status();
  EXPECT_NE(saved.status().message().find("checkpoint step 2"), std::string::npos);
  // A writer with nothing to write meets the full disk at the DONE marker: the manager's error.
  saved = manager.Save(3, [](const std::string&) { return absl::OkStatus(); });
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kResourceExhausted) << saved.status();
  EXPECT_NE(saved.status().message().find("no space left on device"), std::string::npos);
  EXPECT_EQ(manager.Latest()->value_or(""), manager.PathFor(1));
  EXPECT_EQ(Entries(), std::vector<std::string>{"step-0000000001"});
  EXPECT_TRUE(Intact(manager, 1));
  // Space is back: the next save succeeds.
  fi_->SetDiskFull(false);
  ASSERT_TRUE(manager.Save(4, PartsWriter(fi_.get(), 4)).ok());
  EXPECT_EQ(manager.Latest()->value_or(""), manager.PathFor(4));
  EXPECT_TRUE(Intact(manager, 4));
}

TEST_F(CheckpointStorageFaultTest, AFailingFsyncFailsTheSaveAndKeepsThePreviousCheckpoint) {
  CheckpointManager manager({.directory = dir_, .keep_last = 2, .file_system = fi_});
  ASSERT_TRUE(manager.Save(1, PartsWriter(fi_.get(), 1)).ok());
  fi_->SetSyncFails(true);
  absl::StatusOr<std::string> saved = manager.Save(2, PartsWriter(fi_.get(), 2));
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kInternal) << saved.status();
  EXPECT_NE(saved.status().message().find("fsync"), std::string::npos) << saved.status();
  EXPECT_EQ(manager.Latest()->value_or(""), manager.PathFor(1));
  EXPECT_EQ(Entries(), std::vector<std::string>{"step-0000000001"});
  fi_->SetSyncFails(false);
  ASSERT_TRUE(manager.Save(2, PartsWriter(fi_.get(), 2)).ok());
  EXPECT_TRUE(Intact(manager, 2));
}

}  // namespace
}  // namespace flywheel
