#include "flywheel/elastic/training_meter.h"

#include <gtest/gtest.h>

namespace flywheel {
namespace {

using scheduler::WorkUnit;

TEST(TrainingMeterTest, BacklogIsWaitingEpisodesPlusTheRunningStepsUntrainedShare) {
  TrainingMeter meter(WorkUnit::kEpisodes, 16);
  // Nothing measured yet: no rate, and every episode of a complete group waits.
  scheduler::TrainingReport r = meter.Report(10, {});
  EXPECT_EQ(r.backlog, 10);
  EXPECT_EQ(r.batch, 16);
  EXPECT_EQ(r.train_seconds_per_unit, 0);
  // 8 taken into the running step, packed in 4 micro-steps of which 1 is run.
  meter.Sampled(8, 400);
  r = meter.Report(4, {.episodes = 8, .tokens = 400, .micro_steps = 4, .done = 1});
  EXPECT_DOUBLE_EQ(r.backlog, 4 + 8 * 0.75);
  // Groups the step holds until a micro-batch's worth arrives are no trainer's work yet.
  EXPECT_EQ(meter.Report(0, {.episodes = 8, .tokens = 400}).backlog, 0);
}

TEST(TrainingMeterTest, TheTokenUnitCountsWaitingEpisodesAtTheMeanSampledLength) {
  TrainingMeter meter(WorkUnit::kTokens, 16);
  meter.Sampled(4, 200);  // 50 trainable tokens each
  const scheduler::TrainingReport r =
      meter.Report(2, {.episodes = 4, .tokens = 200, .micro_steps = 2, .done = 2});
  EXPECT_DOUBLE_EQ(r.backlog, 2 * 50.0);
  EXPECT_DOUBLE_EQ(r.batch, 16 * 50.0);
}

TEST(TrainingMeterTest, SecondsPerUnitAreTheCoresComputeOverItsShareOfTheStep) {
  TrainingMeter meter(WorkUnit::kEpisodes, 16);
  // The core ran 2 of 4 micro-steps of a 16-episode step in 4 s: 0.5 s per episode.
  meter.StepDone({.compute_seconds = 4, .cell_micro_steps = 2, .micro_steps = 4, .episodes = 16});
  EXPECT_DOUBLE_EQ(meter.Report(0, {}).train_seconds_per_unit, 0.5);
  // A step the core ran nothing of says nothing about its speed.
  meter.StepDone({.compute_seconds = 9, .cell_micro_steps = 0, .micro_steps = 4, .episodes = 16});
  EXPECT_DOUBLE_EQ(meter.Report(0, {}).train_seconds_per_unit, 0.5);
  // A slower step moves the estimate towards it, not all the way.
  meter.StepDone({.compute_seconds = 8, .cell_micro_steps = 4, .micro_steps = 4, .episodes = 8});
  const double rate = meter.Report(0, {}).train_seconds_per_unit;
  EXPECT_GT(rate, 0.5);
  EXPECT_LT(rate, 1.0);
}

TEST(TrainingMeterTest, MicroStepsPerStepAreEveryParticipantsAveragedOverSteps) {
  TrainingMeter meter(WorkUnit::kEpisodes, 16);
  EXPECT_EQ(meter.Report(0, {}).micro_steps, 0);  // no step yet
  // Counted whoever ran them: the core ran none of the first step's 4.
  meter.StepDone({.compute_seconds = 0, .cell_micro_steps = 0, .micro_steps = 4, .episodes = 16});
  EXPECT_DOUBLE_EQ(meter.Report(0, {}).micro_steps, 4);
  meter.StepDone({.compute_seconds = 1, .cell_micro_steps = 2, .micro_steps = 6, .episodes = 16});
  const double m = meter.Report(0, {}).micro_steps;
  EXPECT_GT(m, 4);
  EXPECT_LT(m, 6);
}

}  // namespace
}  // namespace flywheel
