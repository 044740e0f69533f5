#include "flywheel/scheduler/elastic_control.h"

#include <gtest/gtest.h>

#include <vector>

namespace flywheel::scheduler {
namespace {

TEST(ElasticAdmissionTest, AdmitsBatchesUpToMaxStalenessAheadOfTheStepsDone) {
  const ElasticAdmission admission{.max_staleness = 1, .batch_groups = 2, .group_size = 4};
  ASSERT_TRUE(admission.Validate().ok());
  // No step done: batches 0 and 1 (2 x 2 groups x 4 episodes).
  EXPECT_EQ(admission.Room(0, 0), 16);
  EXPECT_EQ(admission.Room(0, 16), 0);
  // One step done and published: batch 2 may start.
  EXPECT_EQ(admission.Room(1, 16), 8);
  EXPECT_EQ(admission.Room(1, 20), 4);
}

TEST(ElasticAdmissionTest, RefusesANegativeBoundNamingTheKey) {
  const ElasticAdmission admission{.max_staleness = -1};
  const absl::Status status = admission.Validate();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("learner.max_staleness"), std::string_view::npos);
}

TEST(ElasticControlTest, RuleAndObservationCarryTheJobsSettings) {
  SchedulerOptions options;
  options.hysteresis = 0.3;
  options.min_residence_seconds = 2;
  const WaterLevelOptions rule = ElasticRule(options, 3, 8);
  EXPECT_EQ(rule.satellites, 3);
  EXPECT_EQ(rule.capacity_per_cell, 8);
  EXPECT_EQ(rule.unit, WorkUnit::kEpisodes);
  EXPECT_EQ(rule.hysteresis, 0.3);
  EXPECT_EQ(rule.min_residence, absl::Seconds(2));

  const SchedulerObservation o = ElasticObservation(absl::UnixEpoch(), 10, 12, 0, 4);
  EXPECT_EQ(o.dispatched, 10);
  EXPECT_EQ(o.finished, 10);
  EXPECT_FALSE(o.new_batch_demanded);
  EXPECT_TRUE(ElasticObservation(absl::UnixEpoch(), 10, 3, 1, 4).new_batch_demanded);
}

TEST(ElasticControlTest, TheTokenUnitWeighsLongEpisodesInFlightMore) {
  SchedulerOptions options;
  options.unit = "tokens";
  const WaterLevelOptions rule = ElasticRule(options, 2, 4, 30);
  EXPECT_EQ(rule.unit, WorkUnit::kTokens);
  EXPECT_EQ(rule.capacity_per_cell, 120);  // 4 episodes x 30 tokens before any estimate

  RemainingTokens estimate(16, 30);
  for (const int64_t length : {2, 2, 4, 40}) estimate.Observe(length);
  SchedulerObservation o = ElasticObservation(absl::UnixEpoch(), 8, 6, 0, 1);
  // Two episodes in flight. Fresh ones would be 12 tokens each; after 5 tokens only the
  // 40-token episode ran longer, so each is expected to need 35 more.
  const std::vector<int64_t> fresh = {0, 0};
  AddTokenWork(estimate, fresh, 4, o);
  EXPECT_DOUBLE_EQ(o.remaining_tokens, 24);
  EXPECT_DOUBLE_EQ(o.capacity_per_cell, 48);
  const std::vector<int64_t> long_ones = {5, 5};
  AddTokenWork(estimate, long_ones, 4, o);
  EXPECT_DOUBLE_EQ(o.remaining_tokens, 70);

  // With 2 rollout satellites, the threshold is 1 x 48 x (1 - h): 24 tokens fit one cell, two
  // 35-token residuals do not, although both are 2 episodes in flight.
  options.hysteresis = 0;
  options.min_residence_seconds = 0;
  auto policy = WaterLevelPolicy::Create(ElasticRule(options, 2, 4, 30));
  ASSERT_TRUE(policy.ok()) << policy.status();
  absl::StatusOr<SchedulerDecision> d = policy->Decide(o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->move, SchedulerDecision::Move::kNone);
  EXPECT_EQ(d->threshold, 48);
  AddTokenWork(estimate, fresh, 4, o);
  o.now += absl::Seconds(1);
  d = policy->Decide(o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->move, SchedulerDecision::Move::kToTrain);
}

TEST(GrantAdmissionTest, SharesTheRoomInWholeGroupsUpToEachCellsSlots) {
  const ElasticAdmission admission{.max_staleness = 0, .batch_groups = 2, .group_size = 4};
  // Room for batch 0: 8 episodes. Cell 0 may hold 6 in flight: one group; cell 1 the other.
  std::vector<CellAdmission> cells(3);
  cells[0].rolling_out = true;
  cells[1].rolling_out = true;
  cells[2].rolling_out = false;  // training: granted nothing
  EXPECT_EQ(GrantAdmission(admission, 0, cells, 6), (std::vector<int64_t>{4, 4, 0}));
  // Cell 0 started its 4 and finished 3: its grant does not grow while room is 0.
  cells[0] = {.rolling_out = true, .dispatched = 4, .finished = 3, .admit_until = 4};
  cells[1] = {.rolling_out = true, .dispatched = 2, .finished = 0, .admit_until = 4};
  EXPECT_EQ(GrantAdmission(admission, 0, cells, 6), (std::vector<int64_t>{4, 4, 0}));
  // Step 0 done: batch 1's 8 episodes. Cell 0 has 1 in flight (5 free: one group), cell 1
  // holds 4 (2 free: none), so the last group stays unassigned until a slot frees.
  EXPECT_EQ(GrantAdmission(admission, 1, cells, 6), (std::vector<int64_t>{8, 4, 0}));
}

TEST(GrantAdmissionTest, ACellLeavingRolloutKeepsWhatItStartedAndFreesTheRest) {
  const ElasticAdmission admission{.max_staleness = 0, .batch_groups = 2, .group_size = 4};
  std::vector<CellAdmission> cells(2);
  cells[0] = {.rolling_out = false, .dispatched = 4, .finished = 1, .admit_until = 8};
  cells[1] = {.rolling_out = true, .dispatched = 0, .finished = 0, .admit_until = 0};
  // Cell 0's unused grant of 4 goes to cell 1.
  EXPECT_EQ(GrantAdmission(admission, 0, cells, 8), (std::vector<int64_t>{4, 4}));
}

TEST(GrantAdmissionTest, ADeadCellsUnfinishedEpisodesAreGivenBack) {
  const ElasticAdmission admission{.max_staleness = 0, .batch_groups = 2, .group_size = 4};
  std::vector<CellAdmission> cells(2);
  // Cell 0 died holding 8 (started 8, finished 4): only its 4 finished count as admitted.
  cells[0] = {.alive = false, .rolling_out = true, .dispatched = 8, .finished = 4,
              .admit_until = 8};
  cells[1] = {.rolling_out = true, .dispatched = 0, .finished = 0, .admit_until = 0};
  EXPECT_EQ(AdmittedEpisodes(cells), 4);
  EXPECT_EQ(GrantAdmission(admission, 0, cells, 8), (std::vector<int64_t>{8, 4}));
}

TEST(ElasticControlTest, ObserveCellsSumsWhatTheSatellitesReport) {
  // Satellite 0 rolls out and took one of satellite 1's episodes over; satellite 1 trains;
  // satellite 2 died holding 2 episodes, which are given back to admission.
  const std::vector<SatelliteReport> satellites = {
      {.rolling_out = true, .dispatched = 10, .finished = 8, .held = 3, .slots = 4,
       .remaining_tokens = 30},
      {.rolling_out = false, .dispatched = 6, .finished = 5, .held = 0, .slots = 4},
      {.alive = false, .rolling_out = true, .dispatched = 5, .finished = 3, .held = 2, .slots = 4,
       .remaining_tokens = 99}};
  const SchedulerObservation o =
      ObserveCells(absl::UnixEpoch(), 7, 5, satellites,
                   {.backlog = 12, .train_seconds_per_unit = 0.5, .micro_steps = 3.5},
                   /*parked=*/1);
  EXPECT_EQ(o.finished, 16);
  EXPECT_EQ(o.in_flight(), 4);  // 3 held + 1 parked; the dead cell's 2 are not in flight
  EXPECT_EQ(o.held, (std::vector<int64_t>{3, 0, 0}));
  EXPECT_EQ(o.alive, (std::vector<bool>{true, true, false}));
  EXPECT_EQ(o.free_slots, 1);  // only rolling-out live cells count
  EXPECT_EQ(o.remaining_tokens, 30);
  EXPECT_EQ(o.admission_room, 5);
  EXPECT_TRUE(o.new_batch_demanded);
  EXPECT_EQ(o.backlog, 12);
  EXPECT_EQ(o.train_seconds_per_unit, 0.5);
  EXPECT_EQ(o.micro_steps, 3.5);
  EXPECT_EQ(o.step, 7);
}

}  // namespace
}  // namespace flywheel::scheduler
