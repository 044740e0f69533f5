#include "flywheel/runtime/embedded_job.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "flywheel/runtime/job_test_util.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;

using testing::GuessConfigPath;
using testing::ReadMetrics;

JobConfig Load(const std::string& name, std::vector<std::string> overrides) {
  // Smaller batches than the example's: these tests check the job's mechanics, not learning.
  overrides.insert(overrides.begin(),
                   {"run.batch_groups=4", "buffer.max_size=8", "actor.episodes_in_flight=32"});
  absl::StatusOr<JobConfig> config = testing::LoadGuessJob(name, overrides);
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

EmbeddedJobOptions Quiet(bool resume = false) {
  EmbeddedJobOptions options;
  options.progress = nullptr;
  options.resume = resume;
  return options;
}

TEST(EmbeddedJobTest, AsyncJobWritesAMetricsLinePerStepAndASummary) {
  const JobConfig config = Load("async", {"run.max_steps=6"});
  absl::StatusOr<EmbeddedJobResult> result = RunEmbeddedJob(config, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->final_step, 6);
  const std::vector<nlohmann::json> metrics = ReadMetrics(config);
  ASSERT_EQ(metrics.size(), 6u);
  for (size_t i = 0; i < metrics.size(); ++i) {
    EXPECT_EQ(metrics[i]["step"].get<int64_t>(), static_cast<int64_t>(i + 1));
    // Actors run ahead by at most the staleness bound.
    EXPECT_LE(metrics[i]["lag_max"].get<int64_t>(), config.learner.max_staleness);
    // The exact lags: one count per trajectory the step saw, none above lag_max.
    int64_t counted = 0;
    for (const auto& [lag, count] : metrics[i]["lag_counts"].items()) {
      EXPECT_LE(std::stoll(lag), metrics[i]["lag_max"].get<int64_t>());
      counted += count.get<int64_t>();
    }
    EXPECT_EQ(counted, metrics[i]["trajectories"].get<int64_t>()) << metrics[i];
  }
  for (const char* key : {"step", "version", "reward_mean", "success_rate", "learner_busy_s",
                          "learner_wait_s", "lag_mean", "lag_max", "dropped", "buffer_size",
                          "tokens_per_s"}) {
    EXPECT_TRUE(metrics.back().contains(key)) << key;
  }
  EXPECT_TRUE(fs::exists(fs::path(config.run.runs_dir) / config.run.name / "summary.json"));
  EXPECT_TRUE(result->summary.contains("latency_audit"));
}

TEST(EmbeddedJobTest, AdmissionKeepsThePipelineWithinItsBatches) {
  // One batch (4 groups) of pipeline although 32 episodes (8 groups) may be in flight and the
  // buffer holds 8 groups: after each sample the buffer holds no more than what was admitted.
  const JobConfig config = Load("admission", {"run.max_steps=5", "run.max_pipeline_batches=1"});
  absl::StatusOr<EmbeddedJobResult> result = RunEmbeddedJob(config, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->final_step, 5);
  for (const nlohmann::json& m : ReadMetrics(config)) {
    EXPECT_LE(m["buffer_size"].get<int64_t>(), config.run.batch_groups) << m;
    EXPECT_EQ(m["dropped"]["buffer_stale"].get<int64_t>(), 0) << m;
  }
}

TEST(EmbeddedJobTest, ColocatedModeTrainsOnFreshBatches) {
  const JobConfig config = Load("colocated", {"run.mode=\"colocated\"", "run.max_steps=3"});
  absl::StatusOr<EmbeddedJobResult> result = RunEmbeddedJob(config, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->final_step, 3);
  const std::vector<nlohmann::json> metrics = ReadMetrics(config);
  ASSERT_EQ(metrics.size(), 3u);
  for (const nlohmann::json& m : metrics) {
    // Generated with the weights of the step before: never stale.
    EXPECT_EQ(m["lag_max"].get<int64_t>(), 0) << m;
  }
  EXPECT_EQ(result->summary["mode"], "colocated");
}

TEST(EmbeddedJobTest, OversampledColocatedStepsTrainOnTheFirstWholeGroups) {
  // Twice the batch is started under a heavy-tailed environment latency: each step trains on
  // the first 4 groups to complete, every member of each, and all the rest is dropped: cut
  // while running, complete beyond the batch, or finished members of an unfinished group.
  const JobConfig config =
      Load("oversample", {"run.mode=\"colocated\"", "run.max_steps=3", "run.oversample=1.0",
                          "env.latency.model=\"lognormal\"", "env.latency.mean_ms=5",
                          "env.latency.sigma=1.0"});
  absl::StatusOr<EmbeddedJobResult> result = RunEmbeddedJob(config, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->final_step, 3);
  const int64_t group = config.actor.group_size;
  for (const nlohmann::json& m : ReadMetrics(config)) {
    EXPECT_EQ(m["trajectories"].get<int64_t>(), config.run.batch_groups * group) << m;
    EXPECT_EQ(m["lag_max"].get<int64_t>(), 0) << m;  // nothing dropped comes back later
  }
  const nlohmann::json& over = result->summary.at("oversample");
  const int64_t dropped = over["episodes_cut"].get<int64_t>() +
                          over["groups_dropped"].get<int64_t>() * group +
                          over["incomplete_dropped"].get<int64_t>();
  EXPECT_EQ(dropped, 3 * config.run.batch_groups * group) << over;
  EXPECT_EQ(result->summary["groups"]["left_in_buffer"].get<int64_t>(), 0);
}

TEST(EmbeddedJobTest, ResumeContinuesFromTheLatestCheckpoint) {
  JobConfig config = Load("resume", {"run.max_steps=2", "learner.checkpoint_every=1"});
  ASSERT_TRUE(RunEmbeddedJob(config, Quiet()).ok());
  EXPECT_TRUE(fs::exists(fs::path(config.run.runs_dir) / "resume" / "checkpoints" /
                         "step-0000000002" / "model.safetensors"));
  // Without --resume the existing run directory is refused.
  absl::StatusOr<EmbeddedJobResult> again = RunEmbeddedJob(config, Quiet());
  EXPECT_FALSE(again.ok());
  config.run.max_steps = 4;
  absl::StatusOr<EmbeddedJobResult> resumed = RunEmbeddedJob(config, Quiet(/*resume=*/true));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->steps, 2);
  EXPECT_EQ(resumed->final_step, 4);
  EXPECT_EQ(ReadMetrics(config).size(), 4u);
}

TEST(EmbeddedJobTest, KlIsToThePolicyTheRunStartedFromAlsoAfterResume) {
  // learner.kl_coef > 0: the policy at the first step becomes π_ref, kept in the run directory.
  JobConfig config = Load("kl", {"run.max_steps=3", "learner.checkpoint_every=3",
                                 "learner.kl_coef=0.1", "learner.lr=1e-2"});
  ASSERT_TRUE(RunEmbeddedJob(config, Quiet()).ok());
  const fs::path reference = fs::path(config.run.runs_dir) / "kl" / "reference.safetensors";
  ASSERT_TRUE(fs::exists(reference));
  const auto written = fs::last_write_time(reference);
  std::vector<nlohmann::json> metrics = ReadMetrics(config);
  ASSERT_EQ(metrics.size(), 3u);
  // The first step's policy is the reference: k3 = e⁰ − 0 − 1.
  EXPECT_NEAR(metrics[0]["kl"].get<double>(), 0.0, 1e-9);
  EXPECT_GT(metrics[2]["kl"].get<double>(), 0.0);
  // Resumed, the KL is still to the first policy (to the restored one it would start at 0).
  config.run.max_steps = 4;
  ASSERT_TRUE(RunEmbeddedJob(config, Quiet(/*resume=*/true)).ok());
  metrics = ReadMetrics(config);
  ASSERT_EQ(metrics.size(), 4u);
  EXPECT_GT(metrics[3]["kl"].get<double>(), 1e-9);
  EXPECT_EQ(fs::last_write_time(reference), written);
}

TEST(EmbeddedJobTest, ResumeWithoutACheckpointIsAClearError) {
  JobConfig config = Load("nockpt", {"run.max_steps=1", "learner.checkpoint_every=0"});
  ASSERT_TRUE(RunEmbeddedJob(config, Quiet()).ok());
  absl::StatusOr<EmbeddedJobResult> resumed = RunEmbeddedJob(config, Quiet(true));
  ASSERT_FALSE(resumed.ok());
  EXPECT_NE(resumed.status().message().find("no complete checkpoint"), std::string::npos)
      << resumed.status();
}

TEST(EmbeddedJobTest, BfloatSixteenTrainsAndDecodes) {
  // Learner under bfloat16 autocast with float32 master weights, actors on bfloat16 snapshots
  // (the LibTorch decode path with a bfloat16 KV cache), checkpoints of the float32 weights.
  const JobConfig config =
      Load("bf16", {"model.dtype=\"bfloat16\"", "run.max_steps=3", "learner.checkpoint_every=3"});
  absl::StatusOr<EmbeddedJobResult> result = RunEmbeddedJob(config, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->final_step, 3);
  for (const nlohmann::json& m : ReadMetrics(config)) {
    EXPECT_TRUE(std::isfinite(m["loss"].get<double>())) << m;
    EXPECT_GT(m["trajectories"].get<int64_t>(), 0) << m;
  }
  // The checkpoint resumes into the same job.
  JobConfig more = config;
  more.run.max_steps = 4;
  absl::StatusOr<EmbeddedJobResult> resumed = RunEmbeddedJob(more, Quiet(true));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->final_step, 4);
}

TEST(EmbeddedJobTest, AGpuDeviceWithoutOneIsAClearError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has a GPU";
  const JobConfig config = Load("cuda", {"model.device=\"cuda\"", "run.max_steps=1"});
  absl::StatusOr<EmbeddedJobResult> result = RunEmbeddedJob(config, Quiet());
  ASSERT_FALSE(result.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(result.status())) << result.status();
  EXPECT_NE(result.status().message().find("model.device = \"cuda\""), std::string::npos)
      << result.status();
}

TEST(EmbeddedJobTest, BadInputGivesClearErrors) {
  absl::StatusOr<JobConfig> missing = LoadJobConfig("/nonexistent/job.toml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/job.toml"), std::string::npos)
      << missing.status();
  absl::StatusOr<JobConfig> mode = LoadJobConfig(GuessConfigPath(), {"run.mode=\"sideways\""});
  ASSERT_FALSE(mode.ok());
  EXPECT_NE(mode.status().message().find("mode"), std::string::npos) << mode.status();
  absl::StatusOr<JobConfig> batch = LoadJobConfig(GuessConfigPath(), {"run.batch_groups=0"});
  ASSERT_FALSE(batch.ok());
  EXPECT_NE(batch.status().message().find("batch_groups"), std::string::npos) << batch.status();
}

}  // namespace
}  // namespace flywheel
