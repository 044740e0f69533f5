#include "flywheel/observe/report_data.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace flywheel {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ReportDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() /
        ("report_data_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "run");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / "run" / name, std::ios::binary) << text;
  }

  fs::path dir_;
};

TEST_F(ReportDataTest, ReadsMetricsSummarySwitchesAndTheLatencyModel) {
  Write("metrics.jsonl", "{\"step\":1,\"reward_mean\":0.5}\n\n{\"step\":2,\"reward_mean\":0.7}\n");
  Write("summary.json", "{\"mode\":\"elastic\",\"elastic\":{\"core_cells\":1,\"satellites\":2}}");
  Write("scheduler.jsonl",
        "{\"type\":\"scheduler_decision\",\"move\":\"none\"}\n"
        "{\"event\":\"switch\",\"satellite\":0,\"to\":\"train\",\"at_s\":0.5}\n");
  Write("config.toml", "[env.latency]\nmodel = 'lognormal'\nmean_ms = 20.0\nsigma = 0.5\n");
  auto data = ReadReportData({dir_ / "run"});
  ASSERT_TRUE(data.ok()) << data.status();
  const auto& run = (*data)["runs"][0];
  EXPECT_EQ(run["name"], "run");
  ASSERT_EQ(run["metrics"].size(), 2u);
  EXPECT_EQ(run["metrics"][1]["reward_mean"], 0.7);
  EXPECT_EQ(run["summary"]["mode"], "elastic");
  ASSERT_EQ(run["switches"].size(), 1u);  // decisions are left out
  EXPECT_EQ(run["cells"]["core"], 1);
  EXPECT_EQ(run["cells"]["satellites"], 2);
  EXPECT_EQ(run["env_latency"]["model"], "lognormal");
  EXPECT_EQ(run["env_latency"]["mean_ms"], 20.0);
}

TEST_F(ReportDataTest, AHalfWrittenLastLineOfALiveRunIsSkippedWithANote) {
  Write("metrics.jsonl", "{\"step\":1}\n{\"step\":2,\"rew");
  auto data = ReadReportData({dir_ / "run"});
  ASSERT_TRUE(data.ok()) << data.status();
  const auto& run = (*data)["runs"][0];
  EXPECT_EQ(run["metrics"].size(), 1u);
  EXPECT_TRUE(run["summary"].is_null());
  ASSERT_EQ(run["notes"].size(), 1u);
  EXPECT_THAT(run["notes"][0].get<std::string>(), HasSubstr("metrics.jsonl:2: last line"));
}

TEST_F(ReportDataTest, AMalformedCompleteLineIsAnErrorNamingFileAndLine) {
  Write("metrics.jsonl", "{\"step\":1}\nnot json\n{\"step\":3}\n");
  auto data = ReadReportData({dir_ / "run"});
  ASSERT_FALSE(data.ok());
  EXPECT_THAT(data.status().message(),
              HasSubstr("run/metrics.jsonl:2: not a JSON object: 'not json'"));
}

TEST_F(ReportDataTest, AMissingDirectoryOrMetricsFileIsNamed) {
  auto missing = ReadReportData({dir_ / "nope"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("nope: no such run directory"));
  auto no_metrics = ReadReportData({dir_ / "run"});
  ASSERT_FALSE(no_metrics.ok());
  EXPECT_THAT(no_metrics.status().message(), HasSubstr("run/metrics.jsonl: missing"));
}

TEST_F(ReportDataTest, TheLiveViewReadsARunNotStartedYetAsEmpty) {
  ReportDataOptions options;
  options.allow_missing = true;
  auto data = ReadReportData({dir_ / "nope"}, options);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_TRUE((*data)["runs"][0]["metrics"].empty());
  EXPECT_EQ((*data)["runs"][0]["notes"][0], "run directory not created yet");
}

TEST_F(ReportDataTest, RunsOfTheSameNameAreLabelledByTheirPath) {
  fs::create_directories(dir_ / "a" / "run");
  std::ofstream(dir_ / "a" / "run" / "metrics.jsonl") << "{\"step\":1}\n";
  Write("metrics.jsonl", "{\"step\":1}\n");
  auto data = ReadReportData({dir_ / "run", dir_ / "a" / "run"});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)["runs"][0]["name"], (dir_ / "run").string());
  EXPECT_EQ((*data)["runs"][1]["name"], (dir_ / "a" / "run").string());
}

}  // namespace
}  // namespace flywheel
