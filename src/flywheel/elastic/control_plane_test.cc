#include "flywheel/elastic/control_plane.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace flywheel {
namespace {

using ::testing::ElementsAre;

// Three satellites of 4 slots, η = 0, batches of 2 groups of 4; the water-level rule with no
// residence, so that each tick's move follows from its inputs alone.
class ControlPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ControlPlaneOptions o;
    o.scheduler.cells = 4;
    o.scheduler.core_cells = 1;
    o.scheduler.controller = "water_level";
    o.scheduler.min_residence_seconds = 0;
    o.scheduler.hysteresis = 0;
    o.admission = {.max_staleness = 0, .batch_groups = 2, .group_size = 4};
    o.episodes_per_cell = 4;
    o.config_hash = "c";
    o.model_hash = "m";
    o.heartbeat_interval = absl::Milliseconds(50);
    o.heartbeat_timeout = absl::Seconds(30);
    auto plane = ControlPlane::Create(o, nullptr, [](int) { return int64_t{0}; });
    ASSERT_TRUE(plane.ok()) << plane.status();
    plane_ = std::move(*plane);
    for (int i = 0; i < 3; ++i) {
      v1::RegisterRequest r;
      r.set_config_hash("c");
      r.set_model_hash("m");
      auto registered = plane_->Register(r);
      ASSERT_TRUE(registered.ok()) << registered.status();
      ids_.push_back(registered->cell());
    }
  }

  // A heartbeat of `cell` in `role`, holding dispatched − finished episodes.
  v1::HeartbeatResponse Beat(int cell, v1::CellRole role, int64_t dispatched, int64_t finished) {
    v1::HeartbeatRequest r;
    r.set_cell(cell);
    r.set_role(role);
    r.set_dispatched(dispatched);
    r.set_finished(finished);
    auto reply = plane_->Heartbeat(r);
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.value_or(v1::HeartbeatResponse());
  }

  std::vector<int> Tick(std::vector<double> parked = {}) {
    TickInputs inputs;
    inputs.parked = std::move(parked);
    now_ += absl::Milliseconds(10);
    auto placements = plane_->Tick(now_, inputs);
    EXPECT_TRUE(placements.ok()) << placements.status();
    return placements.value_or(std::vector<int>());
  }

  std::unique_ptr<ControlPlane> plane_;
  std::vector<int> ids_;
  absl::Time now_ = absl::Now();
};

TEST_F(ControlPlaneTest, CellsAreIdentifiedAfterTheCoresAndGrantedTheBatchInWholeGroups) {
  EXPECT_THAT(ids_, ElementsAre(1, 2, 3));
  for (int id : ids_) Beat(id, v1::CELL_ROLE_ROLLOUT, 0, 0);
  Tick();
  // Batch 0 (η = 0): 8 episodes, in groups of 4, to the first cells with room.
  EXPECT_EQ(Beat(1, v1::CELL_ROLE_ROLLOUT, 0, 0).admit_until(), 4);
  EXPECT_EQ(Beat(2, v1::CELL_ROLE_ROLLOUT, 0, 0).admit_until(), 4);
  EXPECT_EQ(Beat(3, v1::CELL_ROLE_ROLLOUT, 0, 0).admit_until(), 0);
}

TEST_F(ControlPlaneTest, AMoveIsTimedUntilTheCellReportsItsNewRole) {
  for (int id : ids_) Beat(id, v1::CELL_ROLE_ROLLOUT, 0, 0);
  Tick();
  // The batch is handed out (no admission room): its 8 episodes fit on two rollout cells of 4,
  // so the rule releases the third.
  Beat(1, v1::CELL_ROLE_ROLLOUT, 4, 0);
  Beat(2, v1::CELL_ROLE_ROLLOUT, 4, 0);
  Tick();
  EXPECT_EQ(Beat(3, v1::CELL_ROLE_ROLLOUT, 0, 0).role(), v1::CELL_ROLE_TRAIN);
  EXPECT_TRUE(plane_->Summary().switches.empty());
  Beat(3, v1::CELL_ROLE_TRAIN, 0, 0);
  Tick();
  const ControlSummary summary = plane_->Summary();
  ASSERT_EQ(summary.switches.size(), 1u);
  EXPECT_TRUE(summary.switches[0].to_train);
  EXPECT_EQ(summary.switches[0].satellite, 2);
}

TEST_F(ControlPlaneTest, ParkedEpisodesGoOnlyWhereASlotIsFreeBeforeAnyNewEpisodeIsGranted) {
  for (int id : ids_) Beat(id, v1::CELL_ROLE_ROLLOUT, 0, 0);
  Tick();  // cells 1 and 2 are granted 4 each: no slot free on them
  Beat(1, v1::CELL_ROLE_ROLLOUT, 4, 0);
  Beat(2, v1::CELL_ROLE_ROLLOUT, 4, 1);  // one finished: a slot frees
  // Five parked episodes: one fits on cell 2, four on cell 3 (if it still rolls out), the rest
  // stays parked; no cell ever holds more than its 4 slots.
  const std::vector<int> placed = Tick({10, 20, 30, 40, 50});
  int64_t placed_count = 0;
  for (int taker : placed) placed_count += taker >= 0;
  for (const CellInfo& c : plane_->cells()) {
    EXPECT_LE(std::max(c.admit_until, c.dispatched) - c.finished, 4) << "cell " << c.cell;
  }
  EXPECT_GE(placed_count, 1);
  EXPECT_LE(plane_->Summary().max_taker_held, 4);
  EXPECT_EQ(plane_->Summary().episodes_placed, placed_count);
}

TEST_F(ControlPlaneTest, ADeadCellFreesItsSlotForTheNextOne) {
  for (int id : ids_) Beat(id, v1::CELL_ROLE_ROLLOUT, 0, 0);
  Tick();
  ASSERT_TRUE(plane_->Exit(2).ok());
  Tick();
  v1::RegisterRequest r;
  r.set_config_hash("c");
  r.set_model_hash("m");
  auto replacement = plane_->Register(r);
  ASSERT_TRUE(replacement.ok());
  EXPECT_EQ(replacement->cell(), 4);  // ids are never reused
  Beat(4, v1::CELL_ROLE_ROLLOUT, 0, 0);
  Tick();
  EXPECT_EQ(plane_->Summary().cells_lost, 0);  // it left: not lost
}

}  // namespace
}  // namespace flywheel
