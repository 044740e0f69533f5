#include "flywheel/scheduler/backlog_controller.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "flywheel/core/strings.h"
#include "flywheel/scheduler/elastic_control.h"

namespace flywheel::scheduler {
namespace {

using ::testing::HasSubstr;
using Move = SchedulerDecision::Move;
using Cause = SchedulerDecision::Cause;

BacklogController MakeController(const BacklogControllerOptions& options) {
  absl::StatusOr<BacklogController> controller = BacklogController::Create(options);
  EXPECT_TRUE(controller.ok()) << controller.status();
  return *std::move(controller);
}

absl::Time At(double seconds) { return absl::UnixEpoch() + absl::Seconds(seconds); }

// 3 satellites of 4 slots, one core; batches of 10 episodes, one cell trains an episode in 2 s,
// learner steps of 10 s. Dead band: release above 0.8 batches (8 episodes), recall below 0.2
// (2). Residence 10 s; no averaging and no pacing, so that each row is decided on what it shows.
BacklogControllerOptions ThreeSatellites() {
  return {.satellites = 3,
          .core_cells = 1,
          .capacity_per_cell = 4,
          .hysteresis = 0.25,
          .min_residence = absl::Seconds(10),
          .release_backlog_batches = 0.8,
          .recall_backlog_batches = 0.2,
          .smoothing_steps = 0,
          .move_interval_steps = 0};
}

SchedulerObservation Observe(double t, int64_t in_flight, int64_t room, int64_t free_slots,
                             double backlog, std::vector<int64_t> held = {}, int64_t step = 1) {
  SchedulerObservation o;
  o.now = At(t);
  o.step = step;
  o.dispatched = 100;
  o.finished = 100 - in_flight;
  o.admission_room = room;
  o.free_slots = free_slots;
  o.backlog = backlog;
  o.train_seconds_per_unit = 2;
  o.batch = 10;
  o.held = std::move(held);
  return o;
}

// Step 0 seen at t = -10 s: observations of step 1 from t = 0 measure a 10 s learner step.
BacklogController PrimedController(const BacklogControllerOptions& options) {
  BacklogController c = MakeController(options);
  EXPECT_TRUE(c.Decide(Observe(-10, 0, 0, 12, 0, {}, 0)).ok());
  return c;
}

TEST(BacklogControllerTest, ScriptedTraceGivesTheHandWorkedMoves) {
  BacklogController c = PrimedController(ThreeSatellites());
  struct Row {
    double t;
    int64_t in_flight, room, free_slots;
    double backlog;
    std::vector<int64_t> held;
    Move move;
    Cause cause;
    int satellite;
  };
  // backlog in batches = backlog / 10; fits on R-1 cells: w <= (R-1) x 4 x 0.75.
  const std::vector<Row> rows = {
      // 3 episodes: 0.3 batches <= 0.8: balanced.
      {0, 12, 4, 0, 3, {4, 4, 4}, Move::kNone, Cause::kBalanced, -1},
      // 10 episodes: 1 batch > 0.8, but w = 12 > 6 = 2 x 4 x 0.75: does not fit.
      {1, 12, 0, 0, 10, {4, 4, 4}, Move::kNone, Cause::kAboveThreshold, -1},
      // w = 5 fits 2 cells: the satellite holding the fewest (1, 1 episode) leaves.
      {2, 5, 0, 7, 10, {2, 1, 2}, Move::kToTrain, Cause::kBacklog, 1},
      // Still 1 batch; w = 2 <= 3 = 1 x 4 x 0.75; satellite 2 (ties go to the highest id).
      {3, 2, 0, 6, 10, {1, 0, 1}, Move::kToTrain, Cause::kBacklog, 2},
      // 1.4 batches, but w = 1 > 0 on the last rollout cell (the floor).
      {4, 1, 0, 3, 14, {1, 0, 0}, Move::kNone, Cause::kMinRolloutCells, -1},
      // Rollout short (room, no slot free) and 0.1 batches < 0.2: satellite 1 (the one that has
      // trained longest) comes back.
      {12.5, 4, 8, 0, 1, {4, 0, 0}, Move::kToRollout, Cause::kRolloutShort, 1},
      // Short again, but satellite 2 switched 9.8 s ago < 10 s.
      {12.8, 8, 8, 0, 0, {4, 4, 0}, Move::kNone, Cause::kResidence, 2},
      // 0.4 batches: inside the dead band, no recall.
      {14, 8, 8, 0, 4, {4, 4, 0}, Move::kNone, Cause::kBalanced, -1},
      {15, 8, 8, 0, 1, {4, 4, 0}, Move::kToRollout, Cause::kRolloutShort, 2},
      // Everyone rolls out and rollout is still short: nothing left to recall.
      {16, 12, 8, 0, 0, {4, 4, 4}, Move::kNone, Cause::kBalanced, -1},
  };
  for (const Row& row : rows) {
    absl::StatusOr<SchedulerDecision> d =
        c.Decide(Observe(row.t, row.in_flight, row.room, row.free_slots, row.backlog, row.held));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->move, row.move) << "t=" << row.t << ": " << d->reason;
    EXPECT_EQ(d->cause, row.cause) << "t=" << row.t << ": " << d->reason;
    if (row.satellite >= 0) EXPECT_EQ(d->satellite, row.satellite) << "t=" << row.t;
  }
  EXPECT_EQ(c.rollout_cells(), 3);
}

// Steps of about 4 micro-steps: 2 rounds on 2 trainers and on 3. A backlog that grows because
// the trainers are the bottleneck releases the satellite that makes 2 trainers (4 → 2 rounds),
// not the one that would make 3; a third trainer a release left over (the steps had 6
// micro-steps) goes back to rollout.
TEST(BacklogControllerTest, ATrainerIsReleasedOnlyWhereItTakesARoundOff) {
  BacklogController c = PrimedController(ThreeSatellites());
  auto observe = [](double t, double micro_steps, std::vector<int64_t> held, int64_t in_flight) {
    SchedulerObservation o = Observe(t, in_flight, 0, 4, 10, std::move(held));
    o.micro_steps = micro_steps;
    return o;
  };
  absl::StatusOr<SchedulerDecision> d = c.Decide(observe(0, 3.9, {2, 1, 2}, 5));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->move, Move::kToTrain) << d->reason;  // 1 → 2 trainers: 4 → 2 rounds
  d = c.Decide(observe(11, 4.2, {1, 0, 0}, 1));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->move, Move::kNone) << d->reason;
  EXPECT_EQ(d->cause, Cause::kNoSpeedup);
  // 4.2 on average: steps of 4.
  EXPECT_THAT(d->reason, HasSubstr("4 micro-steps per step take 2 rounds on 2 trainers and no "
                                   "fewer on up to 3: no move"));
  // Steps of 6: a third trainer takes a round off (3 → 2) and is released.
  d = c.Decide(observe(22, 6, {1, 0, 0}, 1));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->move, Move::kToTrain) << d->reason;
  EXPECT_EQ(c.rollout_cells(), 1);
  // Back to 4: the trainer that switched longest ago returns, whatever the backlog says.
  d = c.Decide(observe(33, 4, {1, 0, 0}, 1));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->move, Move::kToRollout) << d->reason;
  EXPECT_EQ(d->cause, Cause::kIdleTrainer);
  EXPECT_EQ(d->satellite, 1);
  EXPECT_EQ(c.rollout_cells(), 2);
  // Two trainers run the 4 in 2 rounds, one would need 4: the split holds.
  d = c.Decide(observe(44, 4, {1, 0, 0}, 1));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->move, Move::kNone) << d->reason;
  EXPECT_EQ(d->cause, Cause::kNoSpeedup);
  EXPECT_EQ(d->ToJson()["micro_steps"], 4);
}

// The count both rules read moves only when the average moves three quarters of a micro-step
// away from it: steps of 4 and 5 in turn do not move a trainer back and forth.
TEST(BacklogControllerTest, AMicroStepCountWaveringAroundAHalfMovesNothing) {
  BacklogController c = PrimedController(ThreeSatellites());
  auto decide = [&](double t, double micro_steps, double backlog, std::vector<int64_t> held,
                    int64_t in_flight) {
    SchedulerObservation o = Observe(t, in_flight, 0, 4, backlog, std::move(held));
    o.micro_steps = micro_steps;
    absl::StatusOr<SchedulerDecision> d = c.Decide(o);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *d : SchedulerDecision{};
  };
  // Steps of 5: 3 trainers take 2 rounds where 2 take 3.
  EXPECT_EQ(decide(0, 5, 10, {2, 1, 2}, 5).move, Move::kToTrain);
  EXPECT_EQ(decide(11, 5, 10, {1, 0, 0}, 1).move, Move::kToTrain);
  // 4.4 is nearer 4 (2 rounds on 2 trainers as on 3), but not by three quarters: still 5.
  SchedulerDecision d = decide(22, 4.4, 4, {1, 0, 0}, 1);
  EXPECT_EQ(d.move, Move::kNone) << d.reason;
  EXPECT_EQ(d.cause, Cause::kBalanced) << d.reason;
  // 4.2 is: the third trainer shortens nothing and goes back.
  d = decide(33, 4.2, 4, {1, 0, 0}, 1);
  EXPECT_EQ(d.move, Move::kToRollout) << d.reason;
  EXPECT_EQ(d.cause, Cause::kIdleTrainer) << d.reason;
}

// 16 micro-steps on up to 7 trainers (7 satellites, one of which keeps rolling out): 4 rounds
// on 4 trainers and on 5, 3 on 6 and on 7. The fifth trainer is released on the way to the
// sixth and not called back; the seventh takes nothing off and is not released.
TEST(BacklogControllerTest, ReleasesLookAheadPastACountThatShortensNothing) {
  BacklogControllerOptions options = ThreeSatellites();
  options.satellites = 7;
  options.min_residence = absl::ZeroDuration();
  BacklogController c = MakeController(options);
  auto observe = [](double t, double backlog) {
    SchedulerObservation o = Observe(t, 1, 0, 60, backlog, {1, 1, 1, 1, 1, 1, 1});
    o.micro_steps = 16;
    return o;
  };
  std::vector<int> trainers;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<SchedulerDecision> d = c.Decide(observe(i, 20));
    ASSERT_TRUE(d.ok()) << d.status();
    trainers.push_back(1 + 7 - c.rollout_cells());
  }
  EXPECT_EQ(trainers, (std::vector<int>{2, 3, 4, 5, 6, 6, 6, 6}));
  // In the dead band nothing moves: the sixth trainer takes a round off the fifth's 4.
  absl::StatusOr<SchedulerDecision> d = c.Decide(observe(9, 4));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->move, Move::kNone) << d->reason;
  EXPECT_EQ(d->cause, Cause::kBalanced) << d->reason;
}

TEST(BacklogControllerTest, ReasonAndJsonNameTheInputs) {
  BacklogController c = PrimedController(ThreeSatellites());
  absl::StatusOr<SchedulerDecision> d = c.Decide(Observe(0, 5, 0, 7, 10, {2, 1, 2}));
  ASSERT_TRUE(d.ok());
  EXPECT_THAT(d->reason, HasSubstr("backlog 1 batches (20 s of training) > "
                                   "release_backlog_batches 0.8"));
  EXPECT_THAT(d->reason, HasSubstr("satellite 1 to train"));
  const nlohmann::json j = d->ToJson();
  EXPECT_EQ(j["cause"], "backlog");
  EXPECT_EQ(j["backlog_seconds"], 20);
  EXPECT_EQ(j["backlog_batches"], 1);
  EXPECT_EQ(j["step_seconds"], 10);
  EXPECT_EQ(j["held"], nlohmann::json({2, 1, 2}));
  EXPECT_TRUE(d->changed);
}

// Averaged over a step, a backlog that spikes for one tick (a batch arriving at once) moves
// nobody; one that stays does.
TEST(BacklogControllerTest, SmoothingIgnoresASpikeButFollowsALastingBacklog) {
  BacklogControllerOptions options = ThreeSatellites();
  options.smoothing_steps = 1;  // 10 s
  BacklogController c = PrimedController(options);
  // No backlog for a while, then one tick of 20 episodes (2 batches), then none.
  for (double t = 0; t < 20; t += 1) ASSERT_TRUE(c.Decide(Observe(t, 2, 0, 10, 0)).ok());
  absl::StatusOr<SchedulerDecision> spike = c.Decide(Observe(20, 2, 0, 10, 20));
  ASSERT_TRUE(spike.ok());
  EXPECT_EQ(spike->move, Move::kNone) << spike->reason;  // 2 x (1 - e^-0.1) = 0.19 <= 0.8
  EXPECT_LT(spike->backlog_batches, 0.8);
  absl::StatusOr<SchedulerDecision> after = c.Decide(Observe(21, 2, 0, 10, 0));
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->move, Move::kNone);
  // The same backlog lasting: released within a few time constants.
  double released_at = -1;
  for (double t = 22; t < 60 && released_at < 0; t += 1) {
    absl::StatusOr<SchedulerDecision> d = c.Decide(Observe(t, 2, 0, 10, 20));
    ASSERT_TRUE(d.ok());
    if (d->move == Move::kToTrain) released_at = t;
  }
  EXPECT_GT(released_at, 22);
  EXPECT_LT(released_at, 22 + 3 * 10);
}

// Two moves are at least move_interval_steps apart, however large the backlog. The step is the
// measured one (10 s) or, when shorter, what the trainers there are now take for a batch (10
// episodes x 2 s over 1, 2, 3 trainers): half of 10, 10 and 6.7 s.
TEST(BacklogControllerTest, MovesArePacedByTheMoveInterval) {
  BacklogControllerOptions options = ThreeSatellites();
  options.move_interval_steps = 0.5;
  BacklogController c = PrimedController(options);
  std::vector<double> moves;
  for (double t = 0; t < 20; t += 1) {
    absl::StatusOr<SchedulerDecision> d = c.Decide(Observe(t, 0, 0, 12, 100, {0, 0, 0}));
    ASSERT_TRUE(d.ok());
    if (d->move != Move::kNone) moves.push_back(t);
  }
  EXPECT_EQ(moves, (std::vector<double>{0, 5, 9}));
}

// Every satellite training with the batch done (w = 0), and admission wants the next one: one
// comes back whatever waits to be trained, since the step being filled needs rollouts.
TEST(BacklogControllerTest, NobodyRollingOutWithAdmissionRoomRecallsOne) {
  BacklogController c = PrimedController(ThreeSatellites());
  // Release all three: the backlog is high and nothing is in flight.
  for (double t : {0.0, 11.0, 22.0}) {
    absl::StatusOr<SchedulerDecision> d = c.Decide(Observe(t, 0, 0, 12, 100, {0, 0, 0}));
    ASSERT_TRUE(d.ok());
    ASSERT_EQ(d->move, Move::kToTrain) << d->reason;
  }
  ASSERT_EQ(c.rollout_cells(), 0);
  // Still 10 batches waiting, but admission has room and nobody generates.
  absl::StatusOr<SchedulerDecision> d = c.Decide(Observe(33, 0, 16, 0, 100, {0, 0, 0}));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->move, Move::kToRollout) << d->reason;
  EXPECT_EQ(d->cause, Cause::kMinRolloutCells);
  EXPECT_THAT(d->reason, HasSubstr("no satellite rolls out"));
}

// A slot whose cell died or left keeps its role for the next cell but generates nothing. Here
// the only satellite rolling out dies while two train and the backlog sits in the dead band:
// counted as rolling out, its free slot hid that nobody generated and the step waited forever.
TEST(BacklogControllerTest, AFreeSlotIsNotARolloutCell) {
  BacklogController c = PrimedController(ThreeSatellites());
  for (double t : {0.0, 11.0}) {  // satellites 2 then 1 to train
    absl::StatusOr<SchedulerDecision> d = c.Decide(Observe(t, 0, 0, 12, 100, {0, 0, 0}));
    ASSERT_TRUE(d.ok());
    ASSERT_EQ(d->move, Move::kToTrain) << d->reason;
  }
  SchedulerObservation o = Observe(22, 0, 4, 0, 5, {0, 0, 0});
  o.alive = {false, true, true};
  absl::StatusOr<SchedulerDecision> d = c.Decide(o);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->rollout_cells_before, 0);
  EXPECT_EQ(d->move, Move::kToRollout) << d->reason;
  EXPECT_EQ(d->satellite, 2) << "the trainer that switched longest ago";
  // A release never picks a free slot, though it holds the fewest episodes.
  o = Observe(33, 0, 0, 4, 100, {0, 0, 3});
  o.alive = {false, true, true};
  d = c.Decide(o);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->move, Move::kToTrain) << d->reason;
  EXPECT_EQ(d->satellite, 2);
}

TEST(BacklogControllerTest, UnknownBatchReleasesNothing) {
  BacklogController c = PrimedController(ThreeSatellites());
  SchedulerObservation o = Observe(0, 0, 0, 12, 1000);
  o.batch = 0;
  absl::StatusOr<SchedulerDecision> d = c.Decide(o);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->move, Move::kNone);
  EXPECT_EQ(d->cause, Cause::kBalanced);
  EXPECT_EQ(d->backlog_batches, 0);
}

// Before a learner step has ended, the step's duration is what the trainers would take for a
// batch: 10 episodes x 2 s on the one core.
TEST(BacklogControllerTest, BeforeTheFirstStepTheStepIsEstimated) {
  BacklogController c = MakeController(ThreeSatellites());
  absl::StatusOr<SchedulerDecision> d = c.Decide(Observe(0, 0, 0, 12, 0, {}, 0));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->step_seconds, 20);
}

TEST(BacklogControllerTest, RefusesBadObservationsAndOptionsByName) {
  BacklogController c = PrimedController(ThreeSatellites());
  SchedulerObservation o = Observe(5, 1, 0, 0, 0);
  o.backlog = -1;
  EXPECT_THAT(std::string(c.Decide(o).status().message()), HasSubstr("backlog"));
  o = Observe(5, 1, 0, 0, 0, {1, 2});
  EXPECT_THAT(std::string(c.Decide(o).status().message()), HasSubstr("held has 2 entries"));
  ASSERT_TRUE(c.Decide(Observe(5, 1, 0, 0, 0)).ok());
  EXPECT_THAT(std::string(c.Decide(Observe(4, 1, 0, 0, 0)).status().message()),
              HasSubstr("time went backwards"));
  BacklogControllerOptions options = ThreeSatellites();
  options.recall_backlog_batches = 0.8;
  EXPECT_THAT(std::string(BacklogController::Create(options).status().message()),
              HasSubstr("release_backlog_batches (0.8) must be above"));
}

TEST(BacklogControllerTest, JobConfigPicksTheController) {
  SchedulerOptions options;
  options.core_cells = 1;
  absl::StatusOr<std::unique_ptr<RoleController>> backlog = MakeElasticController(options, 3, 4);
  ASSERT_TRUE(backlog.ok()) << backlog.status();
  EXPECT_THAT((*backlog)->DebugString(), HasSubstr("BacklogController"));
  options.controller = "water_level";
  absl::StatusOr<std::unique_ptr<RoleController>> water = MakeElasticController(options, 3, 4);
  ASSERT_TRUE(water.ok()) << water.status();
  EXPECT_THAT((*water)->DebugString(), HasSubstr("WaterLevelPolicy"));
}

// A small cluster on a scripted clock, ticked every second: satellites rolling out run `slots`
// episodes each, an episode takes its drawn rollout seconds (handed over with what it has
// left), the core and the training satellites train `train_rate` episodes/s each on what has
// finished, and admission lets batches up to η ahead of the steps trained start
// (ElasticAdmission). What the controller sees is what the jobs observe.
struct ToyCluster {
  int satellites = 7;
  int64_t slots = 8;
  double episode_seconds = 40;  // mean; each episode draws uniformly in [0.5, 1.5] x this
  double train_rate = 0.5;      // episodes per second per training cell
  ElasticAdmission admission{.max_staleness = 2, .batch_groups = 32, .group_size = 1};

  std::mt19937_64 rng{7};
  std::vector<std::vector<double>> left;  // per satellite: rollout seconds left per episode
  int64_t dispatched = 0, finished = 0;
  double trained = 0;
  int64_t switches = 0;
  // Rollout satellites summed over the ticks of the last Run, for their mean.
  double rollout_ticks = 0;
  double ticks = 0;
  double mean_rollout() const { return rollout_ticks / ticks; }

  int64_t steps() const {
    return static_cast<int64_t>(trained) / (admission.batch_groups * admission.group_size);
  }

  void Run(RoleController& c, double from, double to) {
    left.resize(satellites);
    rollout_ticks = ticks = 0;
    for (double t = from; t < to; t += 1) {
      rollout_ticks += c.rollout_cells();
      ++ticks;
      // Rollout: one second of every episode on a rolling-out satellite.
      int trainers = 1;
      for (int s = 0; s < satellites; ++s) {
        if (c.role(s) == CellRole::kTrain) {
          ++trainers;
          continue;
        }
        for (double& l : left[s]) l -= 1;
        finished += std::erase_if(left[s], [](double l) { return l <= 0; });
        std::uniform_real_distribution<double> draw(0.5 * episode_seconds, 1.5 * episode_seconds);
        while (static_cast<int64_t>(left[s].size()) < slots &&
               admission.Room(steps(), dispatched) > 0) {
          left[s].push_back(draw(rng));
          ++dispatched;
        }
      }
      trained = std::min<double>(finished, trained + trainers * train_rate);
      SchedulerObservation o;
      o.now = At(t);
      o.step = steps();
      o.dispatched = dispatched;
      o.finished = finished;
      o.admission_room = std::max<int64_t>(0, admission.Room(steps(), dispatched));
      o.backlog = static_cast<double>(finished) - trained;
      o.train_seconds_per_unit = 1 / train_rate;
      o.batch = static_cast<double>(admission.batch_groups * admission.group_size);
      for (int s = 0; s < satellites; ++s) {
        const int64_t held = static_cast<int64_t>(left[s].size());
        o.held.push_back(held);
        if (c.role(s) == CellRole::kRollout) o.free_slots += slots - held;
      }
      absl::StatusOr<SchedulerDecision> d = c.Decide(o);
      ASSERT_TRUE(d.ok()) << d.status();
      if (d->move == SchedulerDecision::Move::kNone) continue;
      ++switches;
      if (d->move == SchedulerDecision::Move::kToTrain) {
        // The leaving satellite's episodes go to the others, least loaded first.
        std::vector<double> moving = std::move(left[d->satellite]);
        left[d->satellite].clear();
        std::sort(moving.begin(), moving.end());
        for (double l : moving) {
          int best = -1;
          for (int s = 0; s < satellites; ++s) {
            if (c.role(s) != CellRole::kRollout) continue;
            if (best < 0 || left[s].size() < left[best].size()) best = s;
          }
          left[best].push_back(l);
        }
      }
    }
  }
};

// The job's default controller (scheduler_options.h), as a job builds it, on 7 satellites of 8
// slots.
BacklogController DefaultController() {
  SchedulerOptions options;
  options.core_cells = 1;
  options.min_residence_seconds = 20;
  absl::StatusOr<std::unique_ptr<RoleController>> made = MakeElasticController(options, 7, 8);
  EXPECT_TRUE(made.ok()) << made.status();
  return *static_cast<BacklogController*>(made->get());
}

// Rollout cells produce 1/5 episode/s each, trainers take 1/2: production meets consumption at
// 5.7 of 7 satellites rolling out, so the split must sit between 5 and 6 without moving back and
// forth (a step here trains 32 episodes in ~25-30 s). With the shipped defaults.
TEST(BacklogControllerTest, SteadyLoadSwitchesAtMostOncePerStep) {
  for (uint64_t seed : {11, 12, 13}) {
    BacklogController c = DefaultController();
    ToyCluster cluster;
    cluster.rng.seed(seed);
    cluster.Run(c, 0, 4000);
    const int64_t steps = cluster.steps();
    SCOPED_TRACE(StrCat("seed ", seed, ": ", cluster.switches, " switches in ", steps, " steps, ",
                        cluster.trained / 4000, " episodes/s"));
    EXPECT_GT(steps, 100);
    EXPECT_LE(cluster.switches, steps);
    // And it trains near the balance: 1.14 episodes/s at 5.7 rollout cells, where a static
    // split of 5 or 6 makes 1.0.
    EXPECT_GT(cluster.trained / 4000, 1.0);
  }
}

// The environment turns three times slower at t = 2000 s (a tool's latency phase): the balance
// moves to every satellite rolling out. The controller must follow within a step and one paced
// move (or residence) per satellite that comes back, plus the steps its averages take, and then
// stay there; when the environment turns fast again, satellites leave again.
TEST(BacklogControllerTest, FollowsAPhaseChangeWithinTheBound) {
  BacklogController c = DefaultController();
  ToyCluster cluster;
  cluster.Run(c, 0, 1000);
  cluster.Run(c, 1000, 2000);
  EXPECT_LT(cluster.mean_rollout(), 6.5) << "before the phase: between 5 and 6 rolling out";
  cluster.episode_seconds *= 3;
  // Episodes already running keep their draws; new ones take 3x as long, and steps ~60 s.
  const double step = 60;
  const double bound = 7 * std::max(20.0, 0.3 * step) + 3 * step;
  cluster.Run(c, 2000, 2000 + bound);
  EXPECT_EQ(c.rollout_cells(), 7) << "within " << bound << " s of the phase change";
  cluster.Run(c, 2000 + bound, 2500 + bound);
  EXPECT_GT(cluster.mean_rollout(), 6.8) << "and stays";
  // And back: the environment turns fast again; the trainers fall behind and satellites leave.
  cluster.episode_seconds /= 3;
  cluster.Run(c, 2500 + bound, 2500 + 2 * bound);
  cluster.Run(c, 2500 + 2 * bound, 3500 + 2 * bound);
  EXPECT_LT(cluster.mean_rollout(), 6.5);
}

}  // namespace
}  // namespace flywheel::scheduler
