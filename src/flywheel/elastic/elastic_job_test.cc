#include "flywheel/elastic/elastic_job.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "flywheel/runtime/job_test_util.h"
#include "flywheel/scheduler/elastic_control.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;

using testing::ReadMetrics;

// Small batches, η = 0 and a short residence. The tiny model trains faster than two satellites
// generate, so the backlog controller (the default) would keep them rolling out; the tests that
// need many switches take the water-level rule, under which every step demands a new batch:
// satellites go back to rollout at each step and to training as each batch's last episodes
// play out.
JobConfig Load(const std::string& name, std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"run.mode=\"elastic\"", "run.batch_groups=2",
                                       "actor.group_size=4", "actor.episodes_in_flight=4",
                                       "learner.max_staleness=0", "env.latency.model=\"lognormal\"",
                                       "env.latency.mean_ms=5", "env.latency.sigma=1",
                                       "scheduler.cells=3", "scheduler.min_residence_seconds=0.02",
                                       "scheduler.hysteresis=0", "scheduler.tick_seconds=0.005"});
  absl::StatusOr<JobConfig> config = testing::LoadGuessJob(name, overrides);
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

EmbeddedJobOptions Quiet() {
  EmbeddedJobOptions options;
  options.progress = nullptr;
  return options;
}

std::vector<nlohmann::json> ReadSchedulerLog(const JobConfig& config) {
  std::ifstream in(fs::path(config.run.runs_dir) / config.run.name / "scheduler.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// Every episode dispatched was inserted once, failed, or was still in flight at the stop.
void ExpectEveryEpisodeAccountedFor(const nlohmann::json& summary) {
  EXPECT_EQ(summary["episodes_duplicated"].get<int64_t>(), 0) << summary.dump(1);
  EXPECT_EQ(summary["episodes_dispatched"].get<int64_t>(),
            summary["episodes_inserted"].get<int64_t>() +
                summary["episodes_failed"].get<int64_t>() +
                summary["episodes_cancelled_at_stop"].get<int64_t>())
      << summary.dump(1);
}

// The observation a scheduler.jsonl decision line was decided on.
scheduler::SchedulerObservation ObservationOf(const nlohmann::json& line) {
  scheduler::SchedulerObservation o;
  o.now = absl::FromUnixNanos(line["unix_time_ns"].get<int64_t>());
  o.step = line["step"].get<int64_t>();
  o.dispatched = line["dispatched"].get<int64_t>();
  o.finished = line["finished"].get<int64_t>();
  o.remaining_tokens = line["remaining_tokens"].get<double>();
  o.capacity_per_cell = line["capacity_per_cell"].get<double>();
  o.new_batch_demanded = line["new_batch_demanded"].get<bool>();
  o.admission_room = line["admission_room"].get<int64_t>();
  o.free_slots = line["free_slots"].get<int64_t>();
  o.backlog = line["backlog"].get<double>();
  o.train_seconds_per_unit = line["train_seconds_per_unit"].get<double>();
  o.batch = line["batch"].get<double>();
  o.micro_steps = line["micro_steps"].get<double>();
  o.held = line["held"].get<std::vector<int64_t>>();
  o.alive = line["alive"].get<std::vector<bool>>();
  return o;
}

// Every decision is logged with its inputs: a fresh controller built from the same config,
// fed the logged observations, decides the same moves. The water-level rule's state changes
// only with a move, so the decisions logged by default (moves and changes of cause) replay; the
// backlog controller averages every observation and needs scheduler.log_every_decision.
void ExpectLoggedDecisionsReplay(const JobConfig& config, int64_t min_moves) {
  const int satellites = static_cast<int>(config.scheduler.cells - config.scheduler.core_cells);
  auto controller = scheduler::MakeElasticController(
      config.scheduler, satellites, static_cast<double>(config.actor.episodes_in_flight));
  ASSERT_TRUE(controller.ok()) << controller.status();
  int64_t moves = 0;
  for (const nlohmann::json& line : ReadSchedulerLog(config)) {
    if (line.value("type", "") != "scheduler_decision") continue;
    absl::StatusOr<scheduler::SchedulerDecision> again = (*controller)->Decide(ObservationOf(line));
    ASSERT_TRUE(again.ok()) << again.status() << " at " << line.dump();
    EXPECT_EQ(scheduler::MoveName(again->move), line["move"].get<std::string>()) << line.dump();
    EXPECT_EQ(again->satellite, line["satellite"].get<int>()) << line.dump();
    EXPECT_EQ(scheduler::CauseName(again->cause), line["cause"].get<std::string>()) << line.dump();
    moves += again->move != scheduler::SchedulerDecision::Move::kNone;
  }
  EXPECT_GE(moves, min_moves);
}

TEST(ElasticJobTest, NoEpisodeIsLostOrDuplicatedOverManySwitches) {
  const JobConfig config =
      Load("elastic_handoff", {"run.max_steps=14", "scheduler.controller=\"water_level\""});
  absl::StatusOr<EmbeddedJobResult> result = RunElasticJob(config, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->final_step, 14);
  const nlohmann::json& summary = result->summary;
  ExpectEveryEpisodeAccountedFor(summary);
  const nlohmann::json& elastic = summary["elastic"];
  EXPECT_GE(elastic["switches"].get<int64_t>(), 20) << elastic.dump(1);
  EXPECT_GT(elastic["to_train"]["count"].get<int64_t>(), 0);
  EXPECT_GT(elastic["to_rollout"]["count"].get<int64_t>(), 0);
  // Episodes were really handed from a cell moving to training to one still rolling out.
  EXPECT_GT(elastic["to_train"]["episodes_handed"].get<int64_t>(), 0) << elastic.dump(1);

  const std::vector<nlohmann::json> metrics = ReadMetrics(config);
  ASSERT_EQ(metrics.size(), 14u);
  int64_t joined = 0;
  for (const nlohmann::json& line : metrics) joined += line["participants"].get<int64_t>() > 1;
  EXPECT_GT(joined, 0) << "no satellite ever took part in a step";
  int64_t moves = 0;
  for (const nlohmann::json& line : ReadSchedulerLog(config)) {
    if (line.contains("move") && line["move"] != "none") ++moves;
  }
  EXPECT_GE(moves, 20);
  // Hand-overs went only where a slot was free (scheduler/hand_over.h), and only episodes that
  // were handed over were placed.
  const nlohmann::json& hand_over = elastic["hand_over"];
  EXPECT_GT(hand_over["episodes_placed"].get<int64_t>(), 0) << hand_over.dump();
  EXPECT_LE(hand_over["episodes_placed"].get<int64_t>(),
            hand_over["episodes_handed"].get<int64_t>())
      << hand_over.dump();
  EXPECT_LE(hand_over["max_taker_held"].get<int64_t>(), config.actor.episodes_in_flight)
      << hand_over.dump();
  ExpectLoggedDecisionsReplay(config, 20);
}

// The backlog controller in a real job: with η = 2 and a fast environment the satellites generate
// faster than the core trains, the backlog grows and one is released, and the controller's
// every look replays on a fresh controller (the simulator's side of the same check is
// SimulatorTest.ElasticDecisionsAreTheProductionControllersOnTheSameTrace).
TEST(ElasticJobTest, TheBacklogControllersDecisionsReplay) {
  const JobConfig config =
      Load("elastic_backlog", {"run.max_steps=12", "learner.max_staleness=2",
                               "env.latency.mean_ms=1", "scheduler.log_every_decision=true"});
  absl::StatusOr<EmbeddedJobResult> result = RunElasticJob(config, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectEveryEpisodeAccountedFor(result->summary);
  ExpectLoggedDecisionsReplay(config, 2);
}

TEST(ElasticJobTest, TheTokenUnitDrivesTheRule) {
  const JobConfig config = Load("elastic_tokens", {"run.max_steps=8", "scheduler.unit=\"tokens\"",
                                                   "scheduler.controller=\"water_level\""});
  absl::StatusOr<EmbeddedJobResult> result = RunElasticJob(config, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->final_step, 8);
  ExpectEveryEpisodeAccountedFor(result->summary);
  EXPECT_GT(result->summary["elastic"]["to_train"]["count"].get<int64_t>(), 0);
  // Every decision counted tokens, with the capacity the job estimated (not the 0 default).
  int64_t decisions = 0;
  for (const nlohmann::json& line : ReadSchedulerLog(config)) {
    if (!line.contains("unit")) continue;
    ++decisions;
    EXPECT_EQ(line["unit"], "tokens") << line.dump();
    EXPECT_GT(line["capacity_per_cell"].get<double>(), 0) << line.dump();
  }
  EXPECT_GT(decisions, 0);
}

TEST(ElasticJobTest, DrainOnSwitchFinishesEpisodesInPlace) {
  const JobConfig config =
      Load("elastic_drain", {"run.max_steps=8", "scheduler.drain_on_switch=true"});
  absl::StatusOr<EmbeddedJobResult> result = RunElasticJob(config, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectEveryEpisodeAccountedFor(result->summary);
  EXPECT_EQ(result->summary["elastic"]["to_train"]["episodes_handed"].get<int64_t>(), 0);
}

TEST(ElasticJobTest, EveryEpisodeIsAccountedForWhenTheWallBudgetEndsTheRun) {
  const JobConfig config = Load("elastic_wall", {"run.max_steps=100000", "run.max_wall_seconds=2"});
  absl::StatusOr<EmbeddedJobResult> result = RunElasticJob(config, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->summary["stopped_by"], "max_wall_seconds");
  ExpectEveryEpisodeAccountedFor(result->summary);
}

TEST(ElasticJobTest, ResumesFromTheCoresCheckpoint) {
  const JobConfig first = Load("elastic_resume", {"run.max_steps=4", "learner.checkpoint_every=2"});
  absl::StatusOr<EmbeddedJobResult> ran = RunElasticJob(first, Quiet());
  ASSERT_TRUE(ran.ok()) << ran.status();
  ASSERT_EQ(ran->final_step, 4);
  JobConfig more = first;
  more.run.max_steps = 6;
  EmbeddedJobOptions resume = Quiet();
  resume.resume = true;
  absl::StatusOr<EmbeddedJobResult> resumed = RunElasticJob(more, resume);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->steps, 2);  // steps 5 and 6, from the checkpoint of step 4
  EXPECT_EQ(resumed->final_step, 6);
  const std::vector<nlohmann::json> metrics = ReadMetrics(more);
  ASSERT_EQ(metrics.size(), 6u);
  EXPECT_EQ(metrics.back()["step"].get<int64_t>(), 6);
}

// Two core cells hold the optimiser, a shard each, and the satellites still come and go; the
// checkpoint keeps both shards and resumes only with two cores.
TEST(ElasticJobTest, TwoCoreCellsTrainCheckpointAndResume) {
  const JobConfig first = Load("elastic_cores", {"scheduler.cells=4", "scheduler.core_cells=2",
                                                 "run.max_steps=4", "learner.checkpoint_every=2"});
  absl::StatusOr<EmbeddedJobResult> ran = RunElasticJob(first, Quiet());
  ASSERT_TRUE(ran.ok()) << ran.status();
  ASSERT_EQ(ran->final_step, 4);
  ExpectEveryEpisodeAccountedFor(ran->summary);
  EXPECT_EQ(ran->summary["elastic"]["core_cells"].get<int64_t>(), 2);
  for (const nlohmann::json& line : ReadMetrics(first)) {
    EXPECT_GE(line["participants"].get<int64_t>(), 2) << line.dump();  // both cores, always
  }
  const fs::path checkpoints = fs::path(first.run.runs_dir) / first.run.name / "checkpoints";
  int shards = 0;
  for (const auto& entry : fs::recursive_directory_iterator(checkpoints)) {
    shards += entry.is_directory() && entry.path().filename().string().rfind("core-", 0) == 0;
  }
  EXPECT_GE(shards, 2);

  EmbeddedJobOptions resume = Quiet();
  resume.resume = true;
  JobConfig one_core = first;
  one_core.scheduler.core_cells = 1;
  absl::StatusOr<EmbeddedJobResult> refused = RunElasticJob(one_core, resume);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("scheduler.core_cells"), std::string::npos)
      << refused.status();

  JobConfig more = first;
  more.run.max_steps = 6;
  absl::StatusOr<EmbeddedJobResult> resumed = RunElasticJob(more, resume);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->steps, 2);
  EXPECT_EQ(resumed->final_step, 6);
}

TEST(ElasticJobTest, ConfigsItCannotRunAreRefused) {
  absl::StatusOr<JobConfig> unbounded =
      testing::LoadGuessJob("elastic_bad", {"run.mode=\"elastic\"", "learner.max_staleness=-1"});
  ASSERT_TRUE(unbounded.ok()) << unbounded.status();
  absl::StatusOr<EmbeddedJobResult> result = RunElasticJob(*unbounded, Quiet());
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("learner.max_staleness"), std::string::npos)
      << result.status();

  absl::StatusOr<JobConfig> one_cell =
      testing::LoadGuessJob("elastic_bad", {"run.mode=\"elastic\"", "scheduler.cells=1"});
  ASSERT_FALSE(one_cell.ok());
  EXPECT_NE(one_cell.status().message().find("scheduler.cells"), std::string::npos)
      << one_cell.status();

  absl::StatusOr<JobConfig> group =
      testing::LoadGuessJob("elastic_bad", {"run.mode=\"elastic\"", "learner.world_size=2"});
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("learner.world_size"), std::string::npos)
      << group.status();
}

}  // namespace
}  // namespace flywheel
