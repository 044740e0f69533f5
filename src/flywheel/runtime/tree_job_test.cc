#include "flywheel/runtime/tree_job.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

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
  absl::StatusOr<JobConfig> config = SmallTreeJob("versions", {"tree.weighting=\"exact\""});
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<TreeJobResult> result = RunTreeJob(*config, TreeJobRunOptions{});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 3);
  EXPECT_EQ(result->version, 4);  // one imitation step, three reinforcement steps

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
  EXPECT_TRUE(std::filesystem::exists(result->run_dir / "summary.json"));
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
