#include "flywheel/scheduler/elastic_control.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace flywheel::scheduler
