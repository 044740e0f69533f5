// The tree job's learning check: imitation of a scripted agent that gives up (submits instead of
// starting an attempt) half the time, then reinforcement learning on the harness's executions,
// trained as prefix-sharing trees, must lift the success rate clearly above where it started —
// by not giving up, which only a fixed program pays for. examples/repair-tree.toml with three
// retries instead of seven, one sub-agent instead of three, half the imitation steps, twice the
// instances a step and a higher learning rate, so that it fits in a test's time (the example's
// curve: docs/learning.md). Step-bounded: a slow machine makes it slower.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "flywheel/core/strings.h"
#include "flywheel/runtime/job_test_util.h"
#include "flywheel/runtime/learning_curve_test_util.h"
#include "flywheel/runtime/tree_job.h"

namespace flywheel {
namespace {

// 100 steps of 32 executions at lr 1e-3 rose 0.010 -> 0.141, 0.020 -> 0.160 (25-step means;
// 50-53 s on 2 idle cores; seeds 2, 3, 4: +0.086, +0.044, +0.082). With three sub-agents, as the
// example has, the trees were 1.25-1.45 times larger: 0.029 -> 0.104 to 0.013 -> 0.121 in 69-92 s.
// With 16 executions a step the rise depended on the run: 160 steps rose by 0.036 to 0.10 over
// eight runs, and with 60 steps of 32 at lr 2e-3 one run of three did not rise (0.010 -> 0.023):
// a step needs groups where one execution kept trying and succeeded beside one that gave up.
// With 75 imitation steps the policy's patches were worse and 80 steps rose by 0.02 to 0.06.
constexpr int kTreeSteps = 100;
constexpr size_t kTreeWindow = 25;
// The margin from the spread: over run.seed 1-6 (2026-12-07, AVX2-only machine, 39-60 s each)
// the rise was +0.118, +0.090, +0.028, +0.106, +0.098, +0.136 (mean 0.096, sd 0.037): seed 3
// barely rose (0.010 -> 0.038), and the margin of 0.04 this test had (set under the smallest
// rise of seeds 2-4) failed it. Two windows of 800 executions at these rates differ by about
// 0.011 (one sd) from sampling alone: 0.025 is 2.3 such sds (a policy that learns nothing passes
// about 1 run in 100) and passes all six seeds, seed 3 by 0.003. The test runs seed 1.
constexpr double kTreeMargin = 0.025;

TEST(TreeLearningTest, ReinforcementLearningLiftsTheImitatedPolicy) {
  absl::StatusOr<JobConfig> config = testing::LoadExampleJob(
      "repair-tree", "tree_curve",
      {StrCat("run.max_steps=", kTreeSteps), "run.max_wall_seconds=0", "tree.max_retries=3",
       "tree.max_subagents=1", "tree.imitation_steps=150", "tree.instances_per_step=8",
       "learner.lr=1e-3", "learner.checkpoint_every=0", "env.latency.model=\"none\""});
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<TreeJobResult> result = RunTreeJob(*config, TreeJobRunOptions{});
  ASSERT_TRUE(result.ok()) << result.status();
  std::vector<double> success;  // per reinforcement step (the result holds no imitation lines)
  for (const nlohmann::json& line : result->metrics) {
    success.push_back(line["success_rate"].get<double>());
  }
  std::filesystem::remove_all(config->run.runs_dir);
  absl::StatusOr<testing::CurveEnds> curve = testing::EndsOf(success, kTreeWindow);
  ASSERT_TRUE(curve.ok()) << curve.status();
  EXPECT_EQ(curve->steps, static_cast<size_t>(kTreeSteps));
  testing::ExpectLifted(*curve, kTreeWindow, kTreeMargin);
}

}  // namespace
}  // namespace flywheel
