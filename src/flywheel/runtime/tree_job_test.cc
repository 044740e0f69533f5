#include "flywheel/runtime/tree_job.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "flywheel/trajectory/call_log.h"

namespace flywheel {
namespace {

// examples/repair-tree.toml, small: 3 steps of 2 instances × 2 executions, a tiny model.
absl::StatusOr<JobConfig> SmallTreeJob(const std::string& name,
                                       std::vector<std::string> overrides = {}) {
  const char* source = std::getenv("FLYWHEEL_SOURCE_DIR");
  const std::filesystem::path runs =
      std::filesystem::temp_directory_path() / ("flywheel_tree_job_test_" + name);
  std::filesystem::remove_all(runs);
  std::vector<std::string> all = {StrCat("run.runs_dir=\"", runs.string(), "\""),
                                  StrCat("run.name=\"", name, "\""),
                                  "run.max_steps=3",
                                  "model.hidden_size=32",
                                  "model.intermediate_size=48",
                                  "tree.instances_per_step=2",
                                  "tree.executions_per_instance=2",
                                  "tree.max_retries=1",
                                  "tree.imitation_steps=1"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return LoadJobConfig(std::string(source != nullptr ? source : ".") + "/examples/repair-tree.toml",
                       all);
}

TEST(TreeJobTest, TrainsOnTreesAndLaterExecutionsUseNewerWeights) {
  absl::StatusOr<JobConfig> config = SmallTreeJob(
      "versions", {"tree.weighting=\"exact\"", "run.mode=\"colocated\"", "tree.imitation_lr=2e-3",
                   "learner.lr=5e-4", "learner.total_steps=1000", "run.eval_episodes=4"});
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<TreeJobResult> result = RunTreeJob(*config, TreeJobRunOptions{});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 3);
  EXPECT_EQ(result->version, 4);  // one imitation step, three reinforcement steps
  // run.eval_episodes: the final weights played 4 executions, into the summary too.
  ASSERT_TRUE(result->eval.has_value());
  EXPECT_EQ(result->eval->episodes, 4);
  EXPECT_EQ(result->eval->version, 4);
  std::ifstream summary_in(result->run_dir / "summary.json");
  const nlohmann::json summary = nlohmann::json::parse(summary_in);
  EXPECT_EQ(summary["eval"]["episodes"], 4);
  // The names every job writes, which flywheel report reads (its time axis, its runs table).
  for (const char* key : {"wall_seconds", "last_reward_mean", "last_success_rate"}) {
    EXPECT_TRUE(summary.contains(key)) << key;
  }
  for (const nlohmann::json& line : result->metrics) EXPECT_TRUE(line.contains("elapsed_s"));

  // The call log of the run: 3 steps × 4 executions, step s sampled with version s (the
  // weights after the imitation step and s − 1 reinforcement steps).
  std::ifstream in(result->run_dir / "calls.jsonl");
  absl::StatusOr<std::vector<Execution>> executions = ReadCallLog(in, "calls.jsonl");
  ASSERT_TRUE(executions.ok()) << executions.status();
  ASSERT_EQ(executions->size(), 12u);
  for (size_t i = 0; i < executions->size(); ++i) {
    const int64_t want = static_cast<int64_t>(i / 4) + 1;
    for (const LlmCall& c : (*executions)[i].calls) {
      for (int64_t v : c.versions) ASSERT_EQ(v, want) << (*executions)[i].execution_id;
    }
  }
  // Executions of one instance share a group.
  EXPECT_EQ((*executions)[0].group_id, (*executions)[1].group_id);
  EXPECT_NE((*executions)[0].group_id, (*executions)[2].group_id);

  ASSERT_EQ(result->metrics.size(), 3u);
  for (const nlohmann::json& m : result->metrics) {
    EXPECT_GT(m["tokens_flat"].get<int64_t>(), m["tokens_tree"].get<int64_t>()) << m.dump();
    EXPECT_TRUE(std::isfinite(m["loss"].get<double>()));
    EXPECT_GT(m["contributions"].get<int64_t>(), 0);
  }
  // Step 1 trains on-policy (sampled with the learner's own weights): the ratio π/μ is 1, so
  // the engine's recorded log-probs are the learner's.
  EXPECT_NEAR(result->metrics[0]["mean_ratio"].get<double>(), 1.0, 1e-4);
  EXPECT_EQ(result->metrics[2]["behaviour_version_min"].get<int64_t>(), 3);
  std::ifstream metrics(result->run_dir / "metrics.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(metrics, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["phase"], "imitation");
  EXPECT_EQ(lines[1]["phase"], "reinforce");
  // Imitation at tree.imitation_lr, reinforcement at learner.lr (the cosine decay over 1,000
  // steps has barely begun).
  EXPECT_NEAR(lines[0]["lr"].get<double>(), 2e-3, 1e-6);
  EXPECT_NEAR(lines[1]["lr"].get<double>(), 5e-4, 1e-6);
  for (size_t i = 1; i < lines.size(); ++i) {
    const double success = lines[i]["success_rate"].get<double>();
    EXPECT_TRUE(success >= 0 && success <= 1) << lines[i].dump();
  }
  EXPECT_TRUE(std::filesystem::exists(result->run_dir / "summary.json"));
}

std::vector<nlohmann::json> ReadLines(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// The pipeline: two harness actors fill the buffer while the learner trains; the buffer keeps
// every trained group within learner.max_staleness versions of the learner.
TEST(TreeJobTest, AsyncTrainsWholeGroupsFromTheBufferWithinTheStalenessBound) {
  absl::StatusOr<JobConfig> config = SmallTreeJob(
      "async",
      {"run.mode=\"async\"", "run.max_steps=5", "actor.num_actors=2", "learner.max_staleness=1"});
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<TreeJobResult> result = RunTreeJob(*config, TreeJobRunOptions{});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 5);
  EXPECT_EQ(result->version, 6);
  ASSERT_EQ(result->metrics.size(), 5u);
  for (const nlohmann::json& m : result->metrics) {
    EXPECT_EQ(m["groups"], 2) << m.dump();
    EXPECT_EQ(m["executions"], 4) << m.dump();
    // Trained at version v − 1 (v after the step) on tokens at most one version behind.
    EXPECT_LE(m["lag_max"].get<int64_t>(), 1) << m.dump();
    EXPECT_GE(m["behaviour_version_min"].get<int64_t>(), m["version"].get<int64_t>() - 2);
    EXPECT_TRUE(std::isfinite(m["loss"].get<double>()));
  }
  // Each step's executions are whole groups: every instance twice.
  std::ifstream in(result->run_dir / "calls.jsonl");
  absl::StatusOr<std::vector<Execution>> executions = ReadCallLog(in, "calls.jsonl");
  ASSERT_TRUE(executions.ok()) << executions.status();
  ASSERT_EQ(executions->size(), 20u);
  std::map<std::string, int> per_group;
  for (const Execution& e : *executions) ++per_group[e.group_id];
  for (const auto& [group, n] : per_group) EXPECT_EQ(n, 2) << group;
  std::ifstream summary_in(result->run_dir / "summary.json");
  const nlohmann::json summary = nlohmann::json::parse(summary_in);
  EXPECT_EQ(summary["mode"], "async");
  EXPECT_GE(summary["groups"]["sampled"].get<int64_t>(), 10);
}

// run.max_pipeline_batches: actors start an instance only while fewer than that many batches'
// instances are being played or wait in the buffer.
TEST(TreeJobTest, AdmissionBoundsTheInstancesPlayedAhead) {
  absl::StatusOr<JobConfig> config =
      SmallTreeJob("admission", {"run.mode=\"async\"", "run.max_steps=5", "actor.num_actors=2",
                                 "run.max_pipeline_batches=1"});
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<TreeJobResult> result = RunTreeJob(*config, TreeJobRunOptions{});
  ASSERT_TRUE(result.ok()) << result.status();
  std::ifstream summary_in(result->run_dir / "summary.json");
  const nlohmann::json summary = nlohmann::json::parse(summary_in);
  // 10 groups trained, at most 2 (one batch) more admitted: none was too stale to train.
  EXPECT_EQ(summary["groups"]["sampled"], 10) << summary.dump();
  EXPECT_LE(summary["instances_started"].get<int64_t>(), 12) << summary.dump();
  EXPECT_EQ(summary["groups"]["dropped_stale"], 0) << summary.dump();
}

// --resume: the newest checkpoint's weights, optimiser and step count, no second imitation.
TEST(TreeJobTest, ResumeContinuesFromTheNewestCheckpoint) {
  for (const char* mode : {"colocated", "async"}) {
    SCOPED_TRACE(mode);
    const std::string name = StrCat("resume-", mode);
    const std::string mode_set = StrCat("run.mode=\"", mode, "\"");
    absl::StatusOr<JobConfig> first =
        SmallTreeJob(name, {mode_set, "run.max_steps=2", "learner.checkpoint_every=2"});
    ASSERT_TRUE(first.ok()) << first.status();
    absl::StatusOr<TreeJobResult> a = RunTreeJob(*first, TreeJobRunOptions{});
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->version, 3);
    ASSERT_TRUE(std::filesystem::exists(a->run_dir / "checkpoints/step-0000000003/DONE"));

    JobConfig second = *first;
    second.run.max_steps = 4;
    TreeJobRunOptions resume;
    resume.resume = true;
    absl::StatusOr<TreeJobResult> b = RunTreeJob(second, resume);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->steps, 4);
    EXPECT_EQ(b->version, 5);
    ASSERT_EQ(b->metrics.size(), 2u);
    EXPECT_EQ(b->metrics[0]["step"], 3);
    // The resumed run's first executions were sampled with the checkpoint's weights (version 3)
    // or newer.
    EXPECT_GE(b->metrics[0]["behaviour_version_min"].get<int64_t>(), 3);
    const std::vector<nlohmann::json> lines = ReadLines(b->run_dir / "metrics.jsonl");
    ASSERT_EQ(lines.size(), 5u);  // one imitation step, then reinforcement steps 1..4
    EXPECT_EQ(lines[0]["phase"], "imitation");
    for (int i = 1; i < 5; ++i) EXPECT_EQ(lines[i]["step"], i);
    EXPECT_TRUE(std::filesystem::exists(b->run_dir / "checkpoints/step-0000000005/DONE"));
  }
}

TEST(TreeJobTest, ResumeWithoutACheckpointSaysSo) {
  absl::StatusOr<JobConfig> config = SmallTreeJob("no-checkpoint", {"learner.checkpoint_every=0"});
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<TreeJobResult> a = RunTreeJob(*config, TreeJobRunOptions{});
  ASSERT_TRUE(a.ok()) << a.status();  // checkpoint_every = 0: none, not even at the end
  TreeJobRunOptions resume;
  resume.resume = true;
  absl::StatusOr<TreeJobResult> b = RunTreeJob(*config, resume);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("no complete checkpoint"), std::string::npos) << b.status();
}

TEST(TreeJobTest, RejectsATaskOtherThanRepair) {
  absl::StatusOr<JobConfig> config = SmallTreeJob("guess", {"env.kind=\"guess\""});
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<TreeJobResult> result = RunTreeJob(*config, TreeJobRunOptions{});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("env.kind"), std::string::npos) << result.status();
}

}  // namespace
}  // namespace flywheel
