#include "flywheel/runtime/run_directory.h"

#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace flywheel {
namespace {

using ::testing::HasSubstr;

std::filesystem::path FreshDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("flywheel_" + name + "_" +
                                                       std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

std::string Read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(RunDirectoryTest, CreatesLayoutAndAppendsMetrics) {
  const auto runs = FreshDir("runs");
  auto dir = RunDirectory::Open(runs, "exp", "[run]\nname = 'exp'\n", false);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_TRUE(std::filesystem::is_directory(runs / "exp" / "checkpoints"));
  EXPECT_EQ(Read(runs / "exp" / "config.toml"), "[run]\nname = 'exp'\n");
  ASSERT_TRUE((*dir)->AppendMetrics({{"step", 1}, {"reward", 0.5}}).ok());
  ASSERT_TRUE((*dir)->AppendMetrics({{"step", 2}, {"reward", 0.75}}).ok());
  // flushed per line: readable while the run goes on
  EXPECT_EQ(Read(runs / "exp" / "metrics.jsonl"),
            "{\"reward\":0.5,\"step\":1}\n{\"reward\":0.75,\"step\":2}\n");
  ASSERT_TRUE((*dir)->WriteSummary({{"steps", 2}}).ok());
  EXPECT_THAT(Read(runs / "exp" / "summary.json"), HasSubstr("\"steps\": 2"));
  EXPECT_FALSE(std::filesystem::exists(runs / "exp" / "summary.json.tmp"));
  // The same lines as TensorBoard scalars (their format: observe/tensorboard_writer_test.cc).
  std::vector<std::filesystem::path> events;
  for (const auto& entry : std::filesystem::directory_iterator(runs / "exp" / "tb")) {
    events.push_back(entry.path());
  }
  ASSERT_EQ(events.size(), 1u);
  EXPECT_THAT(events[0].filename().string(), ::testing::StartsWith("events.out.tfevents."));
  EXPECT_THAT(Read(events[0]), HasSubstr("reward"));
  EXPECT_FALSE(std::filesystem::exists(runs / "exp" / "trace.json"));  // run.trace is off
}

TEST(RunDirectoryTest, ExistingRunNeedsResume) {
  const auto runs = FreshDir("resume");
  ASSERT_TRUE(RunDirectory::Open(runs, "exp", "", false).ok());
  auto again = RunDirectory::Open(runs, "exp", "", false);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(again.status().message(), HasSubstr("--resume"));
  {
    auto resumed = RunDirectory::Open(runs, "exp", "", true);
    ASSERT_TRUE(resumed.ok());
    ASSERT_TRUE((*resumed)->AppendMetrics({{"step", 3}}).ok());
  }
  auto resumed = RunDirectory::Open(runs, "exp", "", true);
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE((*resumed)->AppendMetrics({{"step", 4}}).ok());
  EXPECT_EQ(Read(runs / "exp" / "metrics.jsonl"), "{\"step\":3}\n{\"step\":4}\n");
  EXPECT_EQ(RunDirectory::Open(runs, "missing", "", true).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RunDirectoryTest, UnwritableLocationIsAnError) {
  auto dir = RunDirectory::Open("/proc/flywheel-cannot-write", "exp", "", false);
  EXPECT_FALSE(dir.ok());
  EXPECT_THAT(dir.status().message(), HasSubstr("/proc/flywheel-cannot-write"));
}

}  // namespace
}  // namespace flywheel
