#include "flywheel/runtime/job_config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/core/config.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

std::string WriteTemp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST(JobConfigTest, ExamplesLoad) {
  const char* source = std::getenv("FLYWHEEL_SOURCE_DIR");
  ASSERT_NE(source, nullptr);
  for (const auto& entry : std::filesystem::directory_iterator(std::string(source) + "/examples")) {
    if (entry.path().extension() != ".toml") continue;
    // Cluster-simulator configs ([cluster], `flywheel sim`) are loaded by the simulator's tests.
    auto table = config::ParseTomlFile(entry.path().string());
    ASSERT_TRUE(table.ok()) << entry.path() << ": " << table.status();
    if (table->contains("cluster")) continue;
    auto job = LoadJobConfig(entry.path().string());
    EXPECT_TRUE(job.ok()) << entry.path() << ": " << job.status();
  }
}

TEST(JobConfigTest, MistypedKeyNamesFileKeyAndSuggestion) {
  const std::string path = WriteTemp("flywheel_bad.toml", "[model]\nhiden_size = 64\n");
  auto job = LoadJobConfig(path);
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(), HasSubstr(path + ":2: unknown key model.hiden_size"));
  EXPECT_THAT(job.status().message(), HasSubstr("did you mean model.hidden_size?"));
}

TEST(JobConfigTest, TextParsesLikeAFileAndErrorsNameItsSource) {
  auto job = ParseJobConfig("[run]\nname = \"a\"\n", "inline.toml", {"model.num_layers=3"});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->run.name, "a");
  EXPECT_EQ(job->model.num_layers, 3);
  auto bad = ParseJobConfig("[model]\nnum_heads = 3\n", "inline.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("inline.toml"));
  EXPECT_THAT(ParseJobConfig("[model\n", "inline.toml").status().message(),
              HasSubstr("inline.toml:1:"));
}

TEST(JobConfigTest, ValidationNamesTheKey) {
  const std::string path = WriteTemp("flywheel_invalid.toml", "[model]\nnum_heads = 3\n");
  auto job = LoadJobConfig(path);
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(), HasSubstr("model.hidden_size"));
  EXPECT_THAT(job.status().message(), HasSubstr(path));
}

TEST(JobConfigTest, KlCoefNeedsAJobWithAReferenceModel) {
  auto elastic = ParseJobConfig("[run]\nmode = \"elastic\"\n[learner]\nkl_coef = 0.1\n",
                                "inline.toml");
  ASSERT_FALSE(elastic.ok());
  EXPECT_THAT(elastic.status().message(), HasSubstr("learner.kl_coef"));
  EXPECT_TRUE(ParseJobConfig("[learner]\nkl_coef = 0.1\n", "inline.toml").ok());
}

TEST(JobConfigTest, OversampleIsForColocatedJobsOnly) {
  auto async = ParseJobConfig("[run]\noversample = 0.25\n", "inline.toml");
  ASSERT_FALSE(async.ok());
  EXPECT_THAT(async.status().message(), HasSubstr("run.oversample"));
  EXPECT_TRUE(
      ParseJobConfig("[run]\nmode = \"colocated\"\noversample = 0.25\n", "inline.toml").ok());
  auto negative =
      ParseJobConfig("[run]\nmode = \"colocated\"\noversample = -1\n", "inline.toml");
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(negative.status().message(), HasSubstr("run.oversample must be >= 0"));
}

TEST(JobConfigTest, OverridesApplyAndPrintedConfigReadsBack) {
  const std::string path = WriteTemp("flywheel_ok.toml", "[run]\nname = \"a\"\n");
  auto job = LoadJobConfig(path, {"run.mode=colocated", "model.num_layers=3"});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->run.mode, TrainMode::kColocated);
  EXPECT_EQ(job->model.num_layers, 3);

  const std::string printed = WriteTemp("flywheel_printed.toml", FormatJobConfig(*job));
  auto again = LoadJobConfig(printed);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->run.mode, TrainMode::kColocated);
  EXPECT_EQ(again->model.num_layers, 3);
  EXPECT_EQ(again->run.name, "a");
}

TEST(JobConfigTest, CopyAnswersMustFitOneTurnAndTheSequence) {
  const std::string path = WriteTemp("flywheel_copy.toml",
                                     "[env]\nkind = \"copy\"\n[env.copy]\nmax_length = 40\n"
                                     "[actor]\nmax_new_tokens = 8\n");
  auto short_turn = LoadJobConfig(path);
  ASSERT_FALSE(short_turn.ok());
  EXPECT_THAT(short_turn.status().message(), HasSubstr("actor.max_new_tokens >= 42"));
  EXPECT_THAT(short_turn.status().message(), HasSubstr(path));
  auto short_sequence = LoadJobConfig(path, {"actor.max_new_tokens=42", "model.max_seq_len=80"});
  ASSERT_FALSE(short_sequence.ok());
  EXPECT_THAT(short_sequence.status().message(), HasSubstr("model.max_seq_len >= 84"));
  EXPECT_TRUE(LoadJobConfig(path, {"actor.max_new_tokens=42", "model.max_seq_len=84"}).ok());
  // Other tasks keep their short turns.
  EXPECT_TRUE(LoadJobConfig(path, {"env.kind=\"guess\""}).ok());
}

TEST(JobConfigTest, MissingFileIsNotFound) {
  auto job = LoadJobConfig("/nonexistent/job.toml");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(job.status().message(), HasSubstr("/nonexistent/job.toml"));
}

}  // namespace
}  // namespace flywheel
