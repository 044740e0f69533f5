#include "flywheel/sim/calibration.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "flywheel/runtime/job_test_util.h"
#include "flywheel/sim/cost_model.h"
#include "flywheel/sim/simulator.h"

namespace flywheel::sim {
namespace {

// The guess task (one-token guesses, up to six turns) at a small size: 4 groups of 4 per step,
// 16 episodes in flight.
JobConfig SmallGuessJob(const std::string& name, const std::string& mode) {
  absl::StatusOr<JobConfig> job = testing::LoadGuessJob(
      name, {StrCat("run.mode=\"", mode, "\""), "run.batch_groups=4", "run.max_steps=5",
             "actor.group_size=4", "actor.episodes_in_flight=16", "learner.checkpoint_every=0",
             "learner.max_staleness=1"});
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

CalibrationOptions Quick(const std::string& name) {
  CalibrationOptions o;
  o.episodes = 32;
  o.decode_steps = 4;
  o.learner_steps = 1;
  o.work_dir = std::filesystem::temp_directory_path() / ("flywheel_calibration_test_" + name);
  std::filesystem::remove_all(o.work_dir);
  return o;
}

TEST(CalibrationTest, MeasuresTheJobAndDescribesItToTheSimulator) {
  const JobConfig job = SmallGuessJob("calibrate", "async");
  absl::StatusOr<Calibration> c = CalibrateJob(job, Quick("calibrate"));
  ASSERT_TRUE(c.ok()) << c.status();
  const MeasuredCosts& m = c->costs;
  EXPECT_GT(m.decode_seconds_per_sequence, 0);
  EXPECT_GE(m.decode_overhead_s, 0);
  EXPECT_GT(m.train_seconds_per_token, 0);
  EXPECT_GE(m.step_overhead_s, 0);
  // Whole groups, at least the episodes asked for.
  ASSERT_EQ(m.turns.size(), 32u);
  for (size_t i = 0; i < m.turns.size(); ++i) {
    // A guess is one token: the policy generated exactly one token per turn.
    EXPECT_EQ(m.generated_tokens[i], m.turns[i]) << "episode " << i;
    EXPECT_LE(m.turns[i], job.actor.max_turns);
    EXPECT_GE(m.prompt_tokens[i], 1);
    EXPECT_GE(m.observation_tokens[i], m.turns[i] - 1);  // an observation after every turn
  }
  // Batch sizes 1, 2, 4, 8 and episodes_in_flight.
  ASSERT_EQ(c->report["decode_points"].size(), 5u);
  EXPECT_EQ(c->report["decode_points"].back()["batch"], 16);
  EXPECT_EQ(c->report["learner_points"].size(), 2u);

  // The simulator config is the job's, and it runs.
  EXPECT_EQ(c->sim.run.mode, SimMode::kAsync);
  EXPECT_EQ(c->sim.cluster.devices, 2);
  EXPECT_EQ(c->sim.run.batch_groups, 4);
  absl::StatusOr<CostModel> model = CostModel::Create(c->sim.cluster, c->sim.workload);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_NEAR(model->DecodeStepSeconds(16, 100),
              m.decode_overhead_s + 16 * m.decode_seconds_per_sequence, 1e-9);
  absl::StatusOr<SimResult> run = Simulate(c->sim);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->summary["steps"], 5);
  std::filesystem::remove_all(Quick("calibrate").work_dir);
}

TEST(CalibrationTest, TheTreeJobIsRefusedByName) {
  JobConfig job = SmallGuessJob("calibrate_tree", "async");
  job.tree.enabled = true;
  absl::StatusOr<Calibration> c = CalibrateJob(job, Quick("calibrate_tree"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tree.enabled"), std::string::npos) << c.status();
}

}  // namespace
}  // namespace flywheel::sim
