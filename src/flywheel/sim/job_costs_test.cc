#include "flywheel/sim/job_costs.h"

#include <gtest/gtest.h>

#include "flywheel/sim/cost_model.h"
#include "flywheel/sim/simulator.h"

namespace flywheel::sim {
namespace {

// What a calibration of a small model could have measured.
MeasuredCosts Costs() {
  MeasuredCosts c;
  c.params = 120'000;
  c.layers = 2;
  c.hidden = 64;
  c.kv_bytes_per_token = 2 * 2 * 32 * 4;
  c.max_seq_len = 256;
  c.decode_overhead_s = 0.004;
  c.decode_seconds_per_sequence = 0.0002;
  c.step_overhead_s = 0.05;
  c.train_seconds_per_token = 2e-5;
  c.weight_swap_s = 0.003;
  c.turns = {1, 1, 3};
  c.prompt_tokens = {10, 12, 8};
  c.generated_tokens = {6, 30, 3};
  c.observation_tokens = {0, 0, 10};
  return c;
}

JobConfig Job(TrainMode mode) {
  JobConfig job;
  job.run.mode = mode;
  job.run.batch_groups = 4;
  job.run.max_steps = 10;
  job.actor.num_actors = 2;
  job.actor.group_size = 4;
  job.actor.episodes_in_flight = 16;
  job.learner.world_size = 3;
  job.learner.token_budget = 512;
  job.learner.max_staleness = 2;
  job.scheduler.cells = 4;
  job.env.latency.model = LatencyKind::kConstant;
  job.env.latency.mean_ms = 20;
  return job;
}

TEST(JobCostsTest, TheCostModelGivesBackWhatWasMeasured) {
  const MeasuredCosts c = Costs();
  absl::StatusOr<SimConfig> sim = SimConfigForJob(Job(TrainMode::kAsync), c);
  ASSERT_TRUE(sim.ok()) << sim.status();
  absl::StatusOr<CostModel> model = CostModel::Create(sim->cluster, sim->workload);
  ASSERT_TRUE(model.ok()) << model.status();
  for (int64_t b : {1, 8, 16}) {
    EXPECT_NEAR(model->DecodeStepSeconds(b, b * 100.0),
                c.decode_overhead_s + c.decode_seconds_per_sequence * b, 1e-12)
        << "batch " << b;
  }
  EXPECT_NEAR(model->TrainSeconds(3000) + model->StepOverheadSeconds(),
              c.step_overhead_s + c.train_seconds_per_token * 3000, 1e-12);
  EXPECT_NEAR(model->WeightTransferSeconds(), c.weight_swap_s, 1e-12);
  EXPECT_NEAR(model->SwitchToTrainSeconds(), c.weight_swap_s, 1e-12);
  // A cell holds what the job's engine holds.
  EXPECT_EQ(model->episode_slots(), 16);
  EXPECT_LE(sim->workload.generation.prefill_mfu, 1);
  EXPECT_LE(sim->workload.training.mfu, 1);
}

// Whichever kernel sets the device's FLOP/s has a share of exactly 1, not 1 + rounding.
TEST(JobCostsTest, TheSharesStayValidAtEveryRatio) {
  MeasuredCosts c = Costs();
  for (double s = 1e-6; s < 1e-2; s *= 1.37) {
    c.decode_seconds_per_sequence = s;
    for (double t : {1e-7, 3.3e-6, 8.674562454212454e-05, 1e-3}) {
      c.train_seconds_per_token = t;
      absl::StatusOr<SimConfig> sim = SimConfigForJob(Job(TrainMode::kAsync), c);
      ASSERT_TRUE(sim.ok()) << "s=" << s << " t=" << t << ": " << sim.status();
    }
  }
}

TEST(JobCostsTest, TheJobsShapeBecomesTheSimulatorsRun) {
  const MeasuredCosts c = Costs();
  absl::StatusOr<SimConfig> colocated = SimConfigForJob(Job(TrainMode::kColocated), c);
  ASSERT_TRUE(colocated.ok()) << colocated.status();
  EXPECT_EQ(colocated->run.mode, SimMode::kColocated);
  EXPECT_EQ(colocated->cluster.devices, 3);  // max(actors, ranks)

  JobConfig async_job = Job(TrainMode::kAsync);
  async_job.run.max_pipeline_batches = 2;
  absl::StatusOr<SimConfig> async = SimConfigForJob(async_job, c);
  ASSERT_TRUE(async.ok()) << async.status();
  EXPECT_EQ(async->cluster.devices, 5);
  EXPECT_EQ(async->run.rollout_devices, 2);
  EXPECT_EQ(async->run.max_pipeline_batches, 2);
  EXPECT_GE(async->buffer.max_size, 2 * 4 + 2);  // what admission admits fits, as in the job

  absl::StatusOr<SimConfig> elastic = SimConfigForJob(Job(TrainMode::kElastic), c);
  ASSERT_TRUE(elastic.ok()) << elastic.status();
  EXPECT_EQ(elastic->cluster.devices, 4);
  EXPECT_EQ(elastic->scheduler.core_cells, 1);

  for (const SimConfig* s : {&*colocated, &*async, &*elastic}) {
    EXPECT_EQ(s->run.batch_groups, 4);
    EXPECT_EQ(s->run.group_size, 4);
    EXPECT_EQ(s->learner.max_staleness, 2);
    EXPECT_EQ(s->learner.token_budget, 512);
    EXPECT_EQ(s->workload.episode.length, LengthKind::kTrace);
    EXPECT_TRUE(s->workload.episode.final_env_step);
    EXPECT_TRUE(s->workload.episode.reset_env_step);
    EXPECT_EQ(s->workload.episode.trace_generated_tokens, c.generated_tokens);
    EXPECT_EQ(s->workload.env_latency.mean_ms, 20);
    absl::StatusOr<SimResult> run = Simulate(*s);
    ASSERT_TRUE(run.ok()) << SimModeName(s->run.mode) << ": " << run.status();
    EXPECT_EQ(run->summary["steps"], 10);
  }
}

TEST(JobCostsTest, WhatTheSimulatorCannotRepresentIsRefused) {
  JobConfig tree = Job(TrainMode::kAsync);
  tree.tree.enabled = true;
  EXPECT_FALSE(SimConfigForJob(tree, Costs()).ok());
  MeasuredCosts none = Costs();
  none.turns.clear();
  absl::Status s = SimConfigForJob(Job(TrainMode::kAsync), none).status();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("episode"), std::string::npos) << s;
  MeasuredCosts zero = Costs();
  zero.train_seconds_per_token = 0;
  EXPECT_FALSE(SimConfigForJob(Job(TrainMode::kAsync), zero).ok());
}

}  // namespace
}  // namespace flywheel::sim
