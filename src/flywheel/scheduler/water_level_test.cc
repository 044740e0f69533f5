#include "flywheel/scheduler/water_level.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/core/clock.h"
#include "flywheel/core/strings.h"

namespace flywheel::scheduler {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using Move = SchedulerDecision::Move;
using Cause = SchedulerDecision::Cause;


WaterLevelPolicy MakePolicy(const WaterLevelOptions& options) {
  absl::StatusOr<WaterLevelPolicy> policy = WaterLevelPolicy::Create(options);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return *std::move(policy);
}

// A move as "t=10s 2 to_train", so a failing sequence prints readably.
std::string MoveString(const SchedulerDecision& d) {
  return StrCat("t=", absl::ToInt64Seconds(d.observation.now - absl::UnixEpoch()), "s ",
                d.satellite, " ", MoveName(d.move));
}

TEST(WaterLevelPolicyTest, ScriptedTraceGivesTheHandWorkedMoves) {
  // 3 satellites x 4 slots, hysteresis 0.25, residence 10 s. Thresholds x 4 x 0.75:
  // R=3 -> 6, R=2 -> 3, R=1 -> 0 (and satellite 0 is the floor while w > 0).
  //
  //   t   disp fin demand  w   R   expected
  //   0   12   0   -      12   3   none, 12 > 6
  //   5   12   5   -       7   3   none, 7 > 6
  //   10  12   6   -       6   3   satellite 2 to train (first switch: no residence)
  //   15  12   9   -       3   2   satellite 1 to train
  //   20  12   11  -       1   1   none, min_rollout_cells
  //   25  12   12  -       0   1   satellite 0 to train (batch done, floor lifts)
  //   30  12   12  -       0   0   none, all training
  //   32  12   12  yes     0   0   none, satellite 0 switched 7 s ago < 10 s
  //   35  12   12  yes     0   0   satellite 0 back (last to leave)
  //   40  12   12  yes     0   1   satellite 1 back
  //   45  12   12  yes     0   2   satellite 2 back
  //   48  12   12  yes     0   3   none, all rolling out
  //   50  12   6   -       6   3   none, satellite 2 switched 5 s ago < 10 s
  //   55  12   6   -       6   3   satellite 2 to train
  struct Row {
    int64_t t, dispatched, finished;
    bool demand;
    Cause cause;
  };
  const std::vector<Row> trace = {
      {0, 12, 0, false, Cause::kAboveThreshold},
      {5, 12, 5, false, Cause::kAboveThreshold},
      {10, 12, 6, false, Cause::kFits},
      {15, 12, 9, false, Cause::kFits},
      {20, 12, 11, false, Cause::kMinRolloutCells},
      {25, 12, 12, false, Cause::kFits},
      {30, 12, 12, false, Cause::kAllTraining},
      {32, 12, 12, true, Cause::kResidence},
      {35, 12, 12, true, Cause::kNewBatch},
      {40, 12, 12, true, Cause::kNewBatch},
      {45, 12, 12, true, Cause::kNewBatch},
      {48, 12, 12, true, Cause::kAllRollingOut},
      {50, 12, 6, false, Cause::kResidence},
      {55, 12, 6, false, Cause::kFits},
  };
  WaterLevelOptions options;
  options.satellites = 3;
  options.capacity_per_cell = 4;
  options.hysteresis = 0.25;
  options.min_residence = absl::Seconds(10);
  WaterLevelPolicy policy = MakePolicy(options);

  VirtualClock clock;
  std::vector<std::string> moves;
  for (const Row& row : trace) {
    clock.Advance(absl::Seconds(row.t) - (clock.Now() - absl::UnixEpoch()));
    SchedulerObservation o{.now = clock.Now(),
                           .dispatched = row.dispatched,
                           .finished = row.finished,
                           .new_batch_demanded = row.demand,
                           .step = row.t};
    absl::StatusOr<SchedulerDecision> d = policy.Decide(o);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->cause, row.cause) << "t=" << row.t << ": " << d->reason;
    if (d->move != Move::kNone) moves.push_back(MoveString(*d));
  }
  EXPECT_THAT(moves, ElementsAreArray({"t=10s 2 to_train", "t=15s 1 to_train", "t=25s 0 to_train",
                                       "t=35s 0 to_rollout", "t=40s 1 to_rollout",
                                       "t=45s 2 to_rollout", "t=55s 2 to_train"}));
  EXPECT_EQ(policy.rollout_cells(), 2);
  EXPECT_EQ(policy.role(2), CellRole::kTrain);
  EXPECT_EQ(policy.last_switch(2), absl::UnixEpoch() + absl::Seconds(55));
}

TEST(WaterLevelPolicyTest, ReasonNamesTheInputsAndChangedMarksNewCauses) {
  WaterLevelOptions options;
  options.satellites = 3;
  options.capacity_per_cell = 4;
  options.hysteresis = 0.25;
  WaterLevelPolicy policy = MakePolicy(options);
  SchedulerObservation o{.now = absl::UnixEpoch(), .dispatched = 12, .finished = 0};
  SchedulerDecision first = *policy.Decide(o);
  EXPECT_TRUE(first.changed);
  EXPECT_EQ(first.reason,
            "w=12 episodes does not fit 2 of 3 rollout cells: 12 > 6 = 2 x 4 x "
            "(1 - 0.25): no move");
  o.finished = 1;
  EXPECT_FALSE(policy.Decide(o)->changed);  // same cause, nothing to log
  o.finished = 9;
  SchedulerDecision move = *policy.Decide(o);
  EXPECT_TRUE(move.changed);
  EXPECT_EQ(move.reason,
            "w=3 episodes fits 2 of 3 rollout cells: 3 <= 6 = 2 x 4 x (1 - 0.25): "
            "satellite 2 to train");
  EXPECT_EQ(move.rollout_cells_before, 3);
  EXPECT_EQ(move.rollout_cells_after, 2);
  EXPECT_DOUBLE_EQ(move.threshold, 6);
  // Same cause again, but a move is always worth logging.
  EXPECT_TRUE(policy.Decide(o)->changed);
}

// Per-satellite switch times of a trace, for the residence and oscillation checks.
struct TraceStats {
  int moves = 0;
  absl::Duration shortest_residence = absl::InfiniteDuration();
};

// 60 s of decisions every 100 ms: w jitters by +-1 around `w_center`, and a new batch is demanded
// on about 1 in 20 decisions (a flickering demand signal).
TraceStats RunNoisyTrace(const WaterLevelOptions& options, int64_t w_center) {
  WaterLevelPolicy policy = MakePolicy(options);
  std::mt19937 rng(7);
  VirtualClock clock;
  std::map<int, absl::Time> last_switch;
  TraceStats stats;
  for (int tick = 0; tick < 600; ++tick) {
    const int64_t w = w_center + static_cast<int64_t>(rng() % 3) - 1;
    SchedulerObservation o{.now = clock.Now(),
                           .dispatched = 100,
                           .finished = 100 - w,
                           .new_batch_demanded = rng() % 20 == 0,
                           .step = tick};
    absl::StatusOr<SchedulerDecision> d = policy.Decide(o);
    EXPECT_TRUE(d.ok()) << d.status();
    if (d->move != Move::kNone) {
      ++stats.moves;
      if (auto it = last_switch.find(d->satellite); it != last_switch.end()) {
        stats.shortest_residence = std::min(stats.shortest_residence, o.now - it->second);
      }
      last_switch[d->satellite] = o.now;
    }
    clock.Advance(absl::Milliseconds(100));
  }
  return stats;
}

TEST(WaterLevelPolicyTest, JitterAroundTheThresholdDoesNotOscillate) {
  // 4 satellites x 4 slots: without margin one cell fewer holds 12; w jitters 11..13 around it.
  WaterLevelOptions options;
  options.satellites = 4;
  options.capacity_per_cell = 4;
  options.hysteresis = 0.25;  // moves only at w <= 9
  options.min_residence = absl::Seconds(5);
  const TraceStats guarded = RunNoisyTrace(options, 12);
  // The margin keeps every satellite rolling out: w never reaches 9.
  EXPECT_EQ(guarded.moves, 0);

  // Right at the margin (w 8..10) the flickering demand can bring cells back, but each satellite
  // keeps a role for min_residence: at most one switch per satellite per 5 s.
  const TraceStats at_margin = RunNoisyTrace(options, 9);
  EXPECT_GE(at_margin.shortest_residence, options.min_residence);
  EXPECT_LE(at_margin.moves, 60 / 5 + 1);

  // Without the guards the same traces thrash: that is what the two knobs are for.
  WaterLevelOptions unguarded = options;
  unguarded.hysteresis = 0;
  unguarded.min_residence = absl::ZeroDuration();
  const TraceStats thrash = RunNoisyTrace(unguarded, 12);
  EXPECT_GT(thrash.moves, 40);
  EXPECT_LT(thrash.shortest_residence, absl::Seconds(1));
}

TEST(WaterLevelPolicyTest, NewBatchBringsSatellitesBackInReverseOrder) {
  WaterLevelOptions options;
  options.satellites = 4;
  options.capacity_per_cell = 2;
  options.hysteresis = 0;
  options.min_residence = absl::ZeroDuration();
  WaterLevelPolicy policy = MakePolicy(options);
  absl::Time now = absl::UnixEpoch();
  auto decide = [&](int64_t in_flight, bool demand) {
    now += absl::Seconds(1);
    absl::StatusOr<SchedulerDecision> d = policy.Decide(
        {.now = now, .dispatched = 8, .finished = 8 - in_flight, .new_batch_demanded = demand});
    EXPECT_TRUE(d.ok()) << d.status();
    return d->move == Move::kNone ? StrCat("none(", CauseName(d->cause), ")")
                                  : StrCat(d->satellite, " ", MoveName(d->move));
  };
  // Drain to 3 in flight: 3 <= (4-1) x 2 and 3 <= (3-1) x 2, then 3 > 1 x 2.
  EXPECT_EQ(decide(3, false), "3 to_train");
  EXPECT_EQ(decide(3, false), "2 to_train");
  EXPECT_EQ(decide(3, false), "none(above_threshold)");
  // A new batch: 2 left last, so it comes back first; no cell leaves while the demand stands,
  // even though w = 0 would fit anywhere.
  EXPECT_EQ(decide(0, true), "2 to_rollout");
  EXPECT_EQ(decide(0, true), "3 to_rollout");
  EXPECT_EQ(decide(0, true), "none(all_rolling_out)");
  // Drain all the way: 3, 2, 1, then 0 once the batch is done; then back as 0, 1, 2, 3.
  EXPECT_EQ(decide(2, false), "3 to_train");
  EXPECT_EQ(decide(2, false), "2 to_train");
  EXPECT_EQ(decide(2, false), "1 to_train");
  EXPECT_EQ(decide(2, false), "none(min_rollout_cells)");
  EXPECT_EQ(decide(0, false), "0 to_train");
  EXPECT_EQ(policy.rollout_cells(), 0);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(policy.role(s), CellRole::kTrain) << s;
  EXPECT_EQ(decide(0, true), "0 to_rollout");
  EXPECT_EQ(decide(0, true), "1 to_rollout");
  EXPECT_EQ(policy.role(1), CellRole::kRollout);
  EXPECT_EQ(policy.role(2), CellRole::kTrain);
  EXPECT_EQ(decide(0, true), "2 to_rollout");
  EXPECT_EQ(decide(0, true), "3 to_rollout");
}

TEST(WaterLevelPolicyTest, WorkWithoutRolloutCellsRestoresTheFloor) {
  WaterLevelOptions options;
  options.satellites = 2;
  options.capacity_per_cell = 4;
  options.min_residence = absl::ZeroDuration();
  WaterLevelPolicy policy = MakePolicy(options);
  const absl::Time t = absl::UnixEpoch();
  ASSERT_EQ(policy.Decide({.now = t})->satellite, 1);
  ASSERT_EQ(policy.Decide({.now = t})->satellite, 0);
  // Rollouts were dispatched with every satellite training and no demand signalled.
  SchedulerDecision d = *policy.Decide({.now = t, .dispatched = 3});
  EXPECT_EQ(d.move, Move::kToRollout);
  EXPECT_EQ(d.cause, Cause::kMinRolloutCells);
  EXPECT_EQ(d.satellite, 0);
  EXPECT_EQ(policy.Decide({.now = t, .dispatched = 3})->cause, Cause::kMinRolloutCells);
  EXPECT_EQ(policy.rollout_cells(), 1);
}

TEST(WaterLevelOptionsTest, BadOptionsNameTheKey) {
  const auto error_of = [](auto mutate) {
    WaterLevelOptions options;
    options.satellites = 2;
    mutate(options);
    absl::Status s = WaterLevelPolicy::Create(options).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    return std::string(s.message());
  };
  EXPECT_THAT(error_of([](auto& o) { o.satellites = 0; }), HasSubstr("scheduler.satellites"));
  EXPECT_THAT(error_of([](auto& o) { o.capacity_per_cell = 0; }),
              HasSubstr("scheduler.capacity_per_cell must be a finite number > 0 (got 0"));
  EXPECT_THAT(error_of([](auto& o) { o.capacity_per_cell = std::nan(""); }),
              HasSubstr("scheduler.capacity_per_cell"));
  EXPECT_THAT(error_of([](auto& o) { o.hysteresis = 1; }),
              HasSubstr("scheduler.hysteresis must be in [0, 1) (got 1)"));
  EXPECT_THAT(error_of([](auto& o) { o.hysteresis = -0.1; }), HasSubstr("scheduler.hysteresis"));
  EXPECT_THAT(error_of([](auto& o) { o.min_residence = absl::Seconds(-1); }),
              HasSubstr("scheduler.min_residence"));
  EXPECT_THAT(error_of([](auto& o) { o.min_rollout_cells = 0; }),
              HasSubstr("scheduler.min_rollout_cells must be in [1, scheduler.satellites = 2]"));
  EXPECT_THAT(error_of([](auto& o) { o.min_rollout_cells = 3; }),
              HasSubstr("scheduler.min_rollout_cells"));

  EXPECT_EQ(*ParseWorkUnit("tokens"), WorkUnit::kTokens);
  EXPECT_THAT(ParseWorkUnit("slots").status().message(), HasSubstr("'slots' is not a work unit"));
}

TEST(WaterLevelPolicyTest, ImpossibleObservationsAreRefusedAndChangeNothing) {
  WaterLevelOptions options;
  options.satellites = 2;
  options.min_residence = absl::ZeroDuration();
  WaterLevelPolicy policy = MakePolicy(options);
  const absl::Time t = absl::UnixEpoch() + absl::Seconds(5);
  absl::Status s = policy.Decide({.now = t, .dispatched = 1, .finished = 2, .step = 41}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("step 41: need 0 <= finished <= dispatched (got "
                                     "dispatched=1, finished=2)"));
  EXPECT_FALSE(policy.Decide({.now = t, .remaining_tokens = std::nan("")}).ok());
  ASSERT_TRUE(policy.Decide({.now = t}).ok());
  s = policy.Decide({.now = t - absl::Seconds(1)}).status();
  EXPECT_THAT(s.message(), HasSubstr("time went backwards by 1s"));
  EXPECT_EQ(policy.rollout_cells(), 1);  // only the one valid decision moved a cell
}

TEST(WaterLevelPolicyTest, TokensUnitComparesTheTokenEstimate) {
  WaterLevelOptions options;
  options.satellites = 2;
  options.unit = WorkUnit::kTokens;
  options.capacity_per_cell = 1000;  // tokens in flight per cell
  options.hysteresis = 0.1;          // one cell fewer holds 900
  WaterLevelPolicy policy = MakePolicy(options);
  const absl::Time t = absl::UnixEpoch();
  // One long episode left: the episode count would fit anywhere, its tokens do not.
  SchedulerDecision d =
      *policy.Decide({.now = t, .dispatched = 8, .finished = 7, .remaining_tokens = 950});
  EXPECT_EQ(d.move, Move::kNone);
  EXPECT_EQ(d.reason,
            "w=950 tokens does not fit 1 of 2 rollout cells: 950 > 900 = 1 x 1000 x (1 - 0.1): "
            "no move");
  // Many short episodes: 5 in flight, but only 900 tokens of work.
  d = *policy.Decide({.now = t, .dispatched = 8, .finished = 3, .remaining_tokens = 900});
  EXPECT_EQ(d.move, Move::kToTrain);
  EXPECT_EQ(d.satellite, 1);
  EXPECT_DOUBLE_EQ(d.work, 900);

  const nlohmann::json j = d.ToJson();
  EXPECT_EQ(j["type"], "scheduler_decision");
  EXPECT_EQ(j["move"], "to_train");
  EXPECT_EQ(j["cause"], "fits");
  EXPECT_EQ(j["satellite"], 1);
  EXPECT_EQ(j["unit"], "tokens");
  EXPECT_EQ(j["work"], 900.0);
  EXPECT_EQ(j["threshold"], 900.0);
  EXPECT_EQ(j["in_flight"], 5);
  EXPECT_EQ(j["remaining_tokens"], 900.0);
  EXPECT_EQ(j["rollout_cells_before"], 2);
  EXPECT_EQ(j["rollout_cells_after"], 1);
  EXPECT_EQ(j["reason"], d.reason);
}

}  // namespace
}  // namespace flywheel::scheduler
