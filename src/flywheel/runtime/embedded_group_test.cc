// `flywheel train` with learner.world_size > 1: the learner ranks are threads of the job's
// process. These tests check the wiring (summary, checkpoints of both kinds, resuming at another
// world size); the numerical equality of the parallel step is proved in learner/.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "flywheel/runtime/embedded_job.h"
#include "flywheel/runtime/job_test_util.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;

using testing::ReadMetrics;

JobConfig LoadGroupJob(const std::string& name, std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"run.batch_groups=4", "buffer.max_size=8",
                                       "actor.episodes_in_flight=32", "learner.checkpoint_every=1"});
  absl::StatusOr<JobConfig> config = testing::LoadGuessJob(name, overrides);
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

EmbeddedJobOptions QuietGroupJob(bool resume = false) {
  EmbeddedJobOptions options;
  options.progress = nullptr;
  options.resume = resume;
  return options;
}

// Runs `config` (resumed or fresh) to config.run.max_steps and checks the step counter and the
// summary's world size.
void RunTo(JobConfig& config, int64_t world_size, const std::string& sharding, int64_t max_steps,
           bool resume) {
  config.learner.world_size = world_size;
  config.learner.sharding = sharding == "full"              ? ShardingMode::kFull
                            : sharding == "grads_optimizer" ? ShardingMode::kGradsOptimizer
                                                            : ShardingMode::kNone;
  config.run.max_steps = max_steps;
  absl::StatusOr<EmbeddedJobResult> result = RunEmbeddedJob(config, QuietGroupJob(resume));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->final_step, max_steps);
  EXPECT_EQ(result->summary["world_size"], world_size);
  EXPECT_EQ(result->summary["sharding"], sharding);
  const std::vector<nlohmann::json> metrics = ReadMetrics(config);
  ASSERT_EQ(metrics.size(), static_cast<size_t>(max_steps));
  for (size_t i = 0; i < metrics.size(); ++i) {
    EXPECT_EQ(metrics[i]["step"].get<int64_t>(), static_cast<int64_t>(i + 1));
  }
  EXPECT_GT(metrics.back()["trainable_tokens"].get<int64_t>(), 0);
}

fs::path Checkpoint(const JobConfig& config, int64_t step) {
  return fs::path(config.run.runs_dir) / config.run.name / "checkpoints" /
         StrCat("step-", std::string(10 - std::to_string(step).size(), '0'), step);
}

TEST(EmbeddedGroupTest, TwoRanksTrainAndTheSummarySaysSo) {
  JobConfig config = LoadGroupJob("group2", {});
  RunTo(config, 2, "none", 3, /*resume=*/false);
  // Replicated state: one full checkpoint, written by rank 0.
  EXPECT_TRUE(fs::exists(Checkpoint(config, 3) / "model.safetensors"));
}

TEST(EmbeddedGroupTest, TwoFullyShardedRanksInColocatedMode) {
  JobConfig config = LoadGroupJob("group2full", {"run.mode=\"colocated\""});
  RunTo(config, 2, "full", 2, /*resume=*/false);
  EXPECT_TRUE(fs::exists(Checkpoint(config, 2) / "manifest.json"));
  EXPECT_TRUE(fs::exists(Checkpoint(config, 2) / "DONE"));
}

TEST(EmbeddedGroupTest, AFullCheckpointResumesAtOneRankThenIntoAShardedGroup) {
  JobConfig config = LoadGroupJob("resume-full", {});
  RunTo(config, 2, "none", 2, false);
  RunTo(config, 1, "none", 3, true);
  EXPECT_TRUE(fs::exists(Checkpoint(config, 3) / "model.safetensors"));
  RunTo(config, 2, "full", 4, true);
}

TEST(EmbeddedGroupTest, AShardedCheckpointResumesAtTwoRanksAndAtOne) {
  // With a KL term: rank 0 keeps the reference model, the others receive it, also resumed.
  JobConfig config = LoadGroupJob("resume-sharded", {"learner.kl_coef=0.1", "learner.lr=1e-2"});
  RunTo(config, 2, "grads_optimizer", 2, false);
  EXPECT_TRUE(fs::exists(Checkpoint(config, 2) / "manifest.json"));
  RunTo(config, 2, "full", 3, true);
  EXPECT_GT(ReadMetrics(config).back()["kl"].get<double>(), 1e-9);
  RunTo(config, 1, "none", 4, true);
  // The 1-rank run wrote a full checkpoint; a sharded one at one rank works too.
  RunTo(config, 1, "grads_optimizer", 5, true);
  EXPECT_TRUE(fs::exists(Checkpoint(config, 5) / "manifest.json"));
}

TEST(EmbeddedGroupTest, TheTreeJobRefusesALearnerGroup) {
  absl::StatusOr<JobConfig> config =
      testing::LoadGuessJob("tree-group", {"tree.enabled=true", "learner.world_size=2"});
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("learner.world_size = 2 with tree.enabled"),
            std::string::npos)
      << config.status();
}

}  // namespace
}  // namespace flywheel
