#include "flywheel/scheduler/scheduler_log.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/scheduler/water_level.h"

namespace flywheel::scheduler {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class SchedulerLogTest : public ::testing::Test {
 protected:
  SchedulerLogTest()
      : dir_(fs::temp_directory_path() /
             ("flywheel_scheduler_log_test_" +
              std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~SchedulerLogTest() override { fs::remove_all(dir_); }

  static std::vector<nlohmann::json> ReadLines(const fs::path& path) {
    std::vector<nlohmann::json> lines;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    return lines;
  }

  const fs::path dir_;
};

TEST_F(SchedulerLogTest, AppendsOneObjectPerDecisionAndKeepsEarlierLines) {
  WaterLevelOptions options;
  options.satellites = 2;
  options.capacity_per_cell = 4;
  absl::StatusOr<WaterLevelPolicy> policy = WaterLevelPolicy::Create(options);
  ASSERT_TRUE(policy.ok()) << policy.status();
  const fs::path path = dir_ / "scheduler.jsonl";
  {
    absl::StatusOr<std::unique_ptr<SchedulerLog>> log = SchedulerLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    SchedulerDecision d = *policy->Decide({.now = absl::UnixEpoch(), .dispatched = 8, .step = 3});
    ASSERT_TRUE((*log)->Append(d).ok());
  }
  // Reopening appends, as a resumed job does.
  absl::StatusOr<std::unique_ptr<SchedulerLog>> log = SchedulerLog::Open(path);
  ASSERT_TRUE(log.ok()) << log.status();
  SchedulerDecision d = *policy->Decide(
      {.now = absl::UnixEpoch() + absl::Seconds(2), .dispatched = 8, .finished = 7, .step = 4});
  ASSERT_TRUE((*log)->Append(d).ok());
  ASSERT_TRUE((*log)->Append(nlohmann::json{{"type", "note"}}).ok());

  const std::vector<nlohmann::json> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["step"], 3);
  EXPECT_EQ(lines[0]["move"], "none");
  EXPECT_EQ(lines[0]["cause"], "above_threshold");
  EXPECT_EQ(lines[0]["in_flight"], 8);
  EXPECT_EQ(lines[1]["move"], "to_train");
  EXPECT_EQ(lines[1]["satellite"], 1);
  EXPECT_EQ(lines[1]["unix_time_s"], 2.0);
  EXPECT_EQ(lines[1]["reason"], d.reason);
  EXPECT_EQ(lines[2]["type"], "note");
}

TEST_F(SchedulerLogTest, OpenNamesThePath) {
  absl::Status s = SchedulerLog::Open(dir_ / "missing" / "scheduler.jsonl").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("missing/scheduler.jsonl: open for append"));
}

TEST_F(SchedulerLogTest, FirstWriteErrorIsLatched) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full to fail writes";
  absl::StatusOr<std::unique_ptr<SchedulerLog>> log = SchedulerLog::Open("/dev/full");
  ASSERT_TRUE(log.ok()) << log.status();
  absl::Status first = (*log)->Append(nlohmann::json{{"type", "note"}});
  EXPECT_EQ(first.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(first.message(), HasSubstr("later decisions are not logged"));
  // A short line might fit a buffer; the latched error is returned anyway.
  EXPECT_EQ((*log)->Append(nlohmann::json{{"x", 1}}), first);
}

}  // namespace
}  // namespace flywheel::scheduler
