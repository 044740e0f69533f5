#include "flywheel/runtime/sampling_defaults.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "flywheel/runtime/job_config.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

// Qwen3-0.6B's generation_config.json.
constexpr char kQwen3Generation[] = R"({
  "bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
  "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
  "transformers_version": "4.51.0"})";

HfGenerationConfig Parse(const char* text) {
  auto g = ParseHfGenerationConfig(text, "generation_config.json");
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

toml::table ParseTable(std::string_view text) { return *config::ParseToml(text, "job.toml"); }

TEST(SamplingDefaultsTest, TheFileFillsOnlyTheKeysTheJobLeftUnset) {
  SamplingParams sampling;
  sampling.temperature = 0.9;  // as bound from the table below
  auto applied = ApplyGenerationDefaults(ParseTable("[sampling]\ntemperature = 0.9\n"),
                                         Parse(kQwen3Generation), "g.json", &sampling);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(sampling.temperature, 0.9);
  EXPECT_EQ(sampling.top_p, 0.95);
  EXPECT_EQ(sampling.top_k, 20);
  EXPECT_THAT(*applied, ::testing::ElementsAre("sampling.top_p = 0.95", "sampling.top_k = 20"));
}

TEST(SamplingDefaultsTest, AJobThatSetsADefaultValueKeepsIt) {
  // top_k = 0 is SamplingParams' default: only the table can tell it was asked for.
  SamplingParams sampling;
  auto applied = ApplyGenerationDefaults(ParseTable("[sampling]\ntop_k = 0\n"),
                                         Parse(kQwen3Generation), "g.json", &sampling);
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(sampling.top_k, 0);
  EXPECT_EQ(sampling.temperature, 0.6);
}

TEST(SamplingDefaultsTest, GreedyOrAbsentFilesChangeNothing) {
  SamplingParams sampling;
  auto greedy = ApplyGenerationDefaults(
      ParseTable(""), Parse(R"({"do_sample": false, "temperature": 0.0, "top_k": 1})"), "g.json",
      &sampling);
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  EXPECT_TRUE(greedy->empty());
  EXPECT_EQ(sampling.temperature, 1.0);
  EXPECT_EQ(sampling.top_k, 0);
  auto absent = ApplyGenerationDefaults(ParseTable(""), HfGenerationConfig{}, "g.json", &sampling);
  ASSERT_TRUE(absent.ok());
  EXPECT_TRUE(absent->empty());
}

TEST(SamplingDefaultsTest, AnInvalidValueNamesTheFileAndTheOverride) {
  SamplingParams sampling;
  auto applied = ApplyGenerationDefaults(ParseTable(""), Parse(R"({"top_p": 1.5})"),
                                         "/m/generation_config.json", &sampling);
  ASSERT_FALSE(applied.ok());
  EXPECT_THAT(applied.status().message(), HasSubstr("/m/generation_config.json: sampling.top_p"));
  EXPECT_THAT(applied.status().message(), HasSubstr("[sampling]"));
}

// Through LoadJobConfig: the file and --set both count as the job setting a key.
TEST(SamplingDefaultsTest, LoadJobConfigAppliesTheModelDirectorysDefaults) {
  const auto dir = std::filesystem::temp_directory_path() / "flywheel_sampling_defaults_test";
  std::filesystem::create_directories(dir / "model");
  std::ofstream(dir / "model" / "generation_config.json") << kQwen3Generation;
  const std::string job = (dir / "job.toml").string();
  std::ofstream(job) << "[model]\npath = \"" << (dir / "model").string()
                     << "\"\n[sampling]\ntop_p = 0.5\n";
  auto config = LoadJobConfig(job, {"sampling.top_k=5"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->sampling.temperature, 0.6);  // the file's
  EXPECT_EQ(config->sampling.top_p, 0.5);        // the job file's
  EXPECT_EQ(config->sampling.top_k, 5);          // --set's
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace flywheel
