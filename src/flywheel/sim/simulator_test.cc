#include "flywheel/sim/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "flywheel/core/strings.h"
#include "flywheel/scheduler/elastic_control.h"
#include "flywheel/scheduler/role_controller.h"
#include "flywheel/sim/sim_test_util.h"

namespace flywheel::sim {
namespace {

using scheduler::SchedulerDecision;
using testing::SmallConfig;

// An elastic run in which satellites move both ways: slower training (a backlog builds up while
// rollout runs ahead) and two slots per cell (rollout falls short of admission), with the
// backlog controller at its defaults.
SimConfig MovingElasticConfig(const char* controller) {
  SimConfig c = SmallConfig(SimMode::kElastic);
  c.run.max_steps = 24;
  c.cluster.bf16_flops = 3e13;
  c.workload.generation.max_batch = 2;
  c.scheduler.controller = controller;

  return c;
}

// The summary without what depends on the machine the simulation ran on.
nlohmann::json Simulated(nlohmann::json summary) {
  summary.erase("events_per_s");
  summary.erase("real_seconds");
  return summary;
}

TEST(SimulatorTest, SameSeedSameRunOtherSeedOtherRun) {
  for (SimMode mode : {SimMode::kColocated, SimMode::kAsync, SimMode::kElastic}) {
    for (double budget : {0.0, 6.0}) {
      SCOPED_TRACE(StrCat(SimModeName(mode), ", time budget ", budget, " s"));
      SimConfig config = SmallConfig(mode);
      config.actor.episode_time_budget_s = budget;
      absl::StatusOr<SimResult> a = Simulate(config);
      absl::StatusOr<SimResult> b = Simulate(config);
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(a->metrics.size(), 12u);
      EXPECT_EQ(Simulated(a->summary), Simulated(b->summary));
      EXPECT_EQ(a->metrics, b->metrics);
      EXPECT_EQ(a->timeline, b->timeline);
      SimConfig other = config;
      other.run.seed = 8;
      absl::StatusOr<SimResult> c = Simulate(other);
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_NE(a->summary["wall_seconds"], c->summary["wall_seconds"]);
      if (budget > 0) {
        EXPECT_GT(a->summary["episodes_timed_out"].get<int64_t>(), 0);
      }
    }
  }
}

// Every episode's first generation (a 512-token prefill, then at least (1024 − 512) / 2 / 4 = 64
// decode steps of >= 1.25 ms: > 80 ms) outlasts a 50 ms budget: all are cut before a token is
// kept, and the steps train on prompts.
TEST(SimulatorTest, ABudgetShorterThanEveryEpisodeCutsThemAll) {
  for (SimMode mode : {SimMode::kColocated, SimMode::kAsync, SimMode::kElastic}) {
    SCOPED_TRACE(SimModeName(mode));
    SimConfig config = SmallConfig(mode);
    config.actor.episode_time_budget_s = 0.05;
    absl::StatusOr<SimResult> result = Simulate(config);
    ASSERT_TRUE(result.ok()) << result.status();
    const nlohmann::json& s = result->summary;
    EXPECT_EQ(s["steps"].get<int64_t>(), 12);
    EXPECT_GT(s["episodes_timed_out"].get<int64_t>(), 0);
    EXPECT_EQ(s["episodes_timed_out"], s["episodes_inserted"]);
    EXPECT_EQ(s["tokens_generated"].get<int64_t>(), 0);
    EXPECT_GT(s["tokens_discarded"].get<int64_t>(), 0);
    EXPECT_EQ(s["tokens_trained"].get<int64_t>(),
              s["trajectories_trained"].get<int64_t>() * config.workload.episode.prompt_tokens);
    for (const nlohmann::json& line : result->metrics) {
      EXPECT_EQ(line["timed_out"], line["trajectories"]);
    }
  }
}

// Colocated, a step waits for its slowest episode, but no longer than the budget: a step then
// takes at most the budget, two switches (3 s each) and the training (16 episodes of at most
// 8,192 tokens on one replica: 6 · 1e9 · 131,072 / 4e14 = 1.97 s, an upper bound).
TEST(SimulatorTest, ABudgetBoundsTheColocatedWaitForTheSlowestEpisode) {
  SimConfig config = SmallConfig(SimMode::kColocated);
  config.workload.env_latency.mean_ms = 10'000;
  const double budget = 8;
  const double bound = budget + 2 * config.workload.training.switch_overhead_s + 2.0;
  auto longest_step = [](const SimResult& r) {
    double longest = 0, last = 0;
    for (const nlohmann::json& line : r.metrics) {
      longest = std::max(longest, line["elapsed_s"].get<double>() - last);
      last = line["elapsed_s"].get<double>();
    }
    return longest;
  };
  absl::StatusOr<SimResult> unbounded = Simulate(config);
  ASSERT_TRUE(unbounded.ok()) << unbounded.status();
  EXPECT_EQ(unbounded->summary["episodes_timed_out"].get<int64_t>(), 0);
  EXPECT_GT(longest_step(*unbounded), bound);  // without the budget, the tail sets the pace

  config.actor.episode_time_budget_s = budget;
  absl::StatusOr<SimResult> bounded = Simulate(config);
  ASSERT_TRUE(bounded.ok()) << bounded.status();
  EXPECT_LE(longest_step(*bounded), bound);
  const int64_t timed_out = bounded->summary["episodes_timed_out"].get<int64_t>();
  EXPECT_GT(timed_out, 0);
  EXPECT_LT(timed_out, 12 * 16);  // the short ones still finish
  EXPECT_LT(bounded->summary["wall_seconds"].get<double>(),
            unbounded->summary["wall_seconds"].get<double>());
  // Cut episodes still complete their groups and are trained on, on-policy.
  EXPECT_EQ(bounded->summary["trajectories_trained"].get<int64_t>(), 12 * 16);
}

TEST(SimulatorTest, ANegativeBudgetIsRefusedByName) {
  SimConfig config = SmallConfig(SimMode::kAsync);
  config.actor.episode_time_budget_s = -1;
  const absl::Status status = Simulate(config).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("actor.episode_time_budget_s"), std::string_view::npos) << status;
}

// The simulator's decisions are the production controller's: the same observations, fed to a
// fresh controller built as the elastic job builds it (MakeElasticController from the job's
// [scheduler] options), give the same decision sequence, field for field; and the admission
// room it observed is the production admission's. A second copy of a controller in the
// simulator would have to match every reason string to pass. For both controllers.
TEST(SimulatorTest, ElasticDecisionsAreTheProductionControllersOnTheSameTrace) {
  for (const char* name : {"backlog", "water_level"}) {
    SCOPED_TRACE(name);
    SimConfig config = MovingElasticConfig(name);
    config.scheduler.log_every_decision = true;
    absl::StatusOr<SimResult> result = Simulate(config);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_GT(result->decisions.size(), 10u);

    const int64_t cells = config.cluster.devices / config.workload.model.devices_per_replica;
    const int64_t slots = result->summary["cells"]["episode_slots"].get<int64_t>();
    absl::StatusOr<std::unique_ptr<scheduler::RoleController>> controller =
        scheduler::MakeElasticController(config.JobSchedulerOptions(cells),
                                         static_cast<int>(cells - 1), static_cast<double>(slots));
    ASSERT_TRUE(controller.ok()) << controller.status();
    const scheduler::ElasticAdmission admission{.max_staleness = config.learner.max_staleness,
                                                .batch_groups = config.run.batch_groups,
                                                .group_size = config.run.group_size};
    int to_train = 0, to_rollout = 0;
    for (const SchedulerDecision& simulated : result->decisions) {
      const scheduler::SchedulerObservation& o = simulated.observation;
      // o.step counts the steps whose weights reached the rollout cells: what admission counts.
      EXPECT_EQ(o.new_batch_demanded, o.admission_room > 0);
      EXPECT_LE(o.admission_room, admission.Room(o.step, 0));
      absl::StatusOr<SchedulerDecision> real = (*controller)->Decide(o);
      ASSERT_TRUE(real.ok()) << real.status();
      ASSERT_EQ(real->ToJson(), simulated.ToJson());
      EXPECT_EQ(real->changed, simulated.changed);
      to_train += real->move == SchedulerDecision::Move::kToTrain;
      to_rollout += real->move == SchedulerDecision::Move::kToRollout;
    }
    // The trace exercises both directions.
    EXPECT_GT(to_train, 0);
    EXPECT_GT(to_rollout, 0);
    EXPECT_EQ(result->summary["cells"]["switches_to_train"].get<int>(), to_train);
  }
}

// A satellite leaving rollout hands its episodes only to cells with room (scheduler/hand_over.h):
// no cell ever holds more than its slots or KV budget, and what finds no room is parked, not
// crammed in.
TEST(SimulatorTest, HandOversNeverExceedACellsSlots) {
  int64_t handed = 0;
  for (const char* name : {"backlog", "water_level"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<SimResult> result = Simulate(MovingElasticConfig(name));
    ASSERT_TRUE(result.ok()) << result.status();
    const nlohmann::json& cells = result->summary["cells"];
    handed += result->summary["episodes_handed_over"].get<int64_t>();
    EXPECT_LE(cells["max_cell_episodes"].get<int64_t>(), cells["episode_slots"].get<int64_t>());
    EXPECT_LE(cells["max_cell_kv_tokens"].get<double>(), cells["kv_budget_tokens"].get<double>());
  }
  EXPECT_GT(handed, 10) << "too few hand-overs for the test to show anything";
}

// drain_on_switch: a leaving cell finishes its episodes in place, so nothing is handed over and
// no generation is cut by a switch.
TEST(SimulatorTest, DrainOnSwitchHandsNothingOver) {
  SimConfig config = MovingElasticConfig("water_level");
  config.scheduler.drain_on_switch = true;
  absl::StatusOr<SimResult> result = Simulate(config);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->summary["episodes_handed_over"].get<int64_t>(), 0);
  EXPECT_GT(result->summary["cells"]["switches_to_train"].get<int64_t>(), 0);
  EXPECT_EQ(result->summary["dropped_work"]["tokens_discarded"].get<int64_t>(), 0);
}

// The token unit counts the tokens still to generate (remaining_tokens.h) and runs to the end.
TEST(SimulatorTest, TheTokenUnitObservesTokensStillToGenerate) {
  SimConfig config = MovingElasticConfig("backlog");
  config.scheduler.unit = "tokens";
  config.scheduler.log_every_decision = true;
  absl::StatusOr<SimResult> result = Simulate(config);
  ASSERT_TRUE(result.ok()) << result.status();
  bool some = false;
  for (const SchedulerDecision& d : result->decisions) {
    EXPECT_EQ(d.unit, scheduler::WorkUnit::kTokens);
    some |= d.observation.remaining_tokens > 0 && d.observation.capacity_per_cell > 0;
  }
  EXPECT_TRUE(some);
  EXPECT_EQ(result->summary["steps"].get<int64_t>(), config.run.max_steps);
}

// Phases: latencies three times as long in every other phase, and episodes twice as long there,
// make the run slower than the steady one; episodes grow as the policy learns.
TEST(SimulatorTest, LoadPhasesAndLengthGrowthChangeTheWorkload) {
  SimConfig steady = SmallConfig(SimMode::kAsync);
  steady.run.max_steps = 24;
  absl::StatusOr<SimResult> base = Simulate(steady);
  ASSERT_TRUE(base.ok()) << base.status();
  SimConfig phased = steady;
  phased.workload.env_latency.phase_seconds = 30;
  phased.workload.env_latency.phase_scales = {1.0, 3.0};
  phased.workload.episode.length_phase_scales = {1.0, 2.0};
  absl::StatusOr<SimResult> slow = Simulate(phased);
  ASSERT_TRUE(slow.ok()) << slow.status();
  EXPECT_GT(slow->sim_seconds, 1.2 * base->sim_seconds);
  SimConfig growing = steady;
  growing.workload.episode.length_growth_per_step = 0.05;
  absl::StatusOr<SimResult> grown = Simulate(growing);
  ASSERT_TRUE(grown.ok()) << grown.status();
  const double first = grown->metrics.front()["tokens"].get<double>();
  const double last = grown->metrics.back()["tokens"].get<double>();
  EXPECT_GT(last, 1.5 * first);
  // Length phases need the latency's phase clock.
  SimConfig bad = steady;
  bad.workload.episode.length_phase_scales = {2.0};
  EXPECT_NE(std::string(Simulate(bad).status().message()).find("phase_seconds"),
            std::string::npos);
}

// The Tunix claim's shape: with multi-second environment steps a synchronous loop leaves the
// learner idle most of the time; a decoupled learner is kept busy.
TEST(SimulatorTest, DecouplingKeepsTheLearnerBusyUnderSlowEnvironments) {
  SimConfig sync = SmallConfig(SimMode::kColocated);
  sync.workload.env_latency.mean_ms = 10'000;
  SimConfig decoupled = sync;
  decoupled.run.mode = SimMode::kAsync;
  decoupled.run.rollout_devices = 6;
  decoupled.learner.max_staleness = 4;
  absl::StatusOr<SimResult> a = Simulate(sync);
  absl::StatusOr<SimResult> b = Simulate(decoupled);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_LT(a->summary["learner_utilization"].get<double>(), 0.1);
  EXPECT_GT(b->summary["learner_utilization"].get<double>(),
            5 * a->summary["learner_utilization"].get<double>());
  EXPECT_GT(b->summary["trained_samples_per_s"].get<double>(),
            a->summary["trained_samples_per_s"].get<double>());
}

TEST(SimulatorTest, StalenessFilterDropsWhatAdmissionLetsThroughLate) {
  SimConfig config = SmallConfig(SimMode::kAsync);
  config.learner.max_staleness = 0;
  absl::StatusOr<SimResult> result = Simulate(config);
  ASSERT_TRUE(result.ok()) << result.status();
  const nlohmann::json& s = result->summary;
  int64_t sampled = 0, beyond = 0;
  for (const auto& [lag, count] : s["staleness"]["lag_counts"].items()) {
    sampled += count.get<int64_t>();
    if (std::stoll(lag) > 0) beyond += count.get<int64_t>();
  }
  EXPECT_EQ(sampled, 12 * 4 * 4);
  EXPECT_EQ(s["groups"]["dropped_stale"].get<int64_t>(), beyond);
  EXPECT_EQ(s["trajectories_trained"].get<int64_t>(), sampled - beyond);
  // Colocated is on-policy by construction.
  absl::StatusOr<SimResult> colocated = Simulate(SmallConfig(SimMode::kColocated));
  ASSERT_TRUE(colocated.ok()) << colocated.status();
  EXPECT_EQ(colocated->summary["staleness"]["lag_counts"].size(), 1u);
  EXPECT_TRUE(colocated->summary["staleness"]["lag_counts"].contains("0"));
}

TEST(SimulatorTest, FailuresAreRestartedAndCounted) {
  SimConfig config = SmallConfig(SimMode::kAsync);
  config.workload.episode.failure_rate = 0.3;
  absl::StatusOr<SimResult> result = Simulate(config);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->summary["episodes_failed"].get<int64_t>(), 0);
  EXPECT_GT(result->summary["tokens_discarded"].get<int64_t>(), 0);
  EXPECT_EQ(result->summary["steps"].get<int64_t>(), 12);
}

TEST(SimulatorTest, SimulatedTimeBoundStopsTheRun) {
  SimConfig config = SmallConfig(SimMode::kElastic);
  config.run.max_sim_hours = 60.0 / 3600;  // one simulated minute
  absl::StatusOr<SimResult> result = Simulate(config);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->summary["stopped_by"], "max_sim_hours");
  EXPECT_LT(result->summary["steps"].get<int64_t>(), 12);
  EXPECT_DOUBLE_EQ(result->sim_seconds, 60);
}

TEST(SimulatorTest, WritesARunDirectoryLikeARealRun) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "flywheel_sim_run_test";
  std::filesystem::remove_all(dir);
  const SimConfig config = SmallConfig(SimMode::kElastic);
  absl::StatusOr<SimResult> result = Simulate(config);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(WriteSimRun(config, *result, dir).ok());
  for (const char* file :
       {"config.toml", "metrics.jsonl", "summary.json", "scheduler.jsonl", "timeline.jsonl"}) {
    EXPECT_TRUE(std::filesystem::exists(dir / file)) << file;
  }
  std::ifstream metrics(dir / "metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["step"].get<int>(), ++lines);
    EXPECT_TRUE(j.contains("utilisation"));
  }
  EXPECT_EQ(lines, 12);
  // A second run does not overwrite the first.
  EXPECT_FALSE(WriteSimRun(config, *result, dir).ok());
  std::filesystem::remove_all(dir);
}

TEST(SimulatorTest, AsyncNeedsAReplicaOnEachSide) {
  SimConfig config = SmallConfig(SimMode::kAsync);
  config.run.rollout_devices = 8;
  const absl::Status status = Simulate(config).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("run.rollout_devices"), std::string_view::npos);
}

// One-turn episodes from a trace, 100 ms of environment: with final_env_step the environment
// answers the only turn, so every colocated step lasts 0.1 s longer; without it, no episode waits
// for the environment at all.
TEST(SimulatorTest, TheFinalEnvironmentStepIsWaitedFor) {
  SimConfig config = SmallConfig(SimMode::kColocated);
  config.workload.episode.length = LengthKind::kTrace;
  config.workload.episode.trace_turns = {1, 1};
  config.workload.episode.trace_prompt_tokens = {16, 20};
  config.workload.episode.trace_generated_tokens = {8, 40};
  config.workload.episode.trace_observation_tokens = {0, 0};
  config.workload.env_latency.model = LatencyKind::kConstant;
  config.workload.env_latency.mean_ms = 100;
  config.workload.training.switch_overhead_s = 0;
  absl::StatusOr<SimResult> without = Simulate(config);
  config.workload.episode.final_env_step = true;
  absl::StatusOr<SimResult> with = Simulate(config);
  ASSERT_TRUE(without.ok()) << without.status();
  ASSERT_TRUE(with.ok()) << with.status();
  const double steps = static_cast<double>(config.run.max_steps);
  const double t_without = without->summary["wall_seconds"].get<double>();
  const double t_with = with->summary["wall_seconds"].get<double>();
  // Every step's batch starts at once and waits 0.1 s more for its slowest episode.
  EXPECT_NEAR(t_with - t_without, steps * 0.1, 1e-6);
  // And another 0.1 s when the reset takes a step's latency too.
  config.workload.episode.reset_env_step = true;
  absl::StatusOr<SimResult> with_reset = Simulate(config);
  ASSERT_TRUE(with_reset.ok()) << with_reset.status();
  EXPECT_NEAR(with_reset->summary["wall_seconds"].get<double>() - t_with, steps * 0.1, 1e-6);
  // The trace's lengths are the trained ones: every trajectory is 24 or 60 tokens.
  const int64_t trained = with->summary["trajectories_trained"].get<int64_t>();
  const int64_t tokens = with->summary["tokens_trained"].get<int64_t>();
  EXPECT_GE(tokens, 24 * trained);
  EXPECT_LE(tokens, 60 * trained);
  EXPECT_GT(tokens, 24 * trained);
  EXPECT_LT(tokens, 60 * trained);
}

// Each data-parallel rank packs its share of the batch: async on 8 cells trains on 4 of them,
// colocated on all 8; the elastic step queue packs the whole batch.
TEST(SimulatorTest, ATokenBudgetSetsTheMicroStepsOfEachStep) {
  for (const auto& [mode, ranks] :
       {std::pair{SimMode::kAsync, 4}, std::pair{SimMode::kColocated, 8},
        std::pair{SimMode::kElastic, 1}}) {
    SCOPED_TRACE(SimModeName(mode));
    SimConfig config = SmallConfig(mode);
    config.learner.token_budget = 3'000;
    absl::StatusOr<SimResult> result = Simulate(config);
    ASSERT_TRUE(result.ok()) << result.status();
    for (const nlohmann::json& line : result->metrics) {
      const int64_t tokens = line["tokens"].get<int64_t>();
      const int64_t share = (tokens + ranks - 1) / ranks;
      EXPECT_EQ(line["micro_steps"].get<int64_t>(),
                ranks * std::max<int64_t>(1, (share + 2'999) / 3'000))
          << line;
    }
  }
}

// A step of one micro-step is the core's whenever the core waits for it, however many satellites
// train (MicroStepQueue::Claim hands micro-steps to core cells first). The water-level rule
// releases satellites whatever the step's size; the backlog controller trains no satellite on
// steps of one micro-step once it has seen one.
TEST(SimulatorTest, TheCoreClaimsAStepsOnlyMicroStepBeforeTheSatellites) {
  SimConfig config = MovingElasticConfig("water_level");
  config.run.max_steps = 40;
  config.learner.token_budget = 1'000'000;  // one micro-step per step
  absl::StatusOr<SimResult> result = Simulate(config);
  ASSERT_TRUE(result.ok()) << result.status();
  int64_t with_satellites = 0;
  for (const nlohmann::json& line : result->metrics) {
    ASSERT_EQ(line["micro_steps"].get<int64_t>(), 1) << line;
    EXPECT_GT(line["learner_busy_s"].get<double>(), 0) << line;  // the core ran it
    with_satellites += line["satellites_training"].get<int64_t>() > 0;
  }
  EXPECT_GT(with_satellites, 0) << "no step had a satellite training: the test shows nothing";
}

// An elastic step streams (MicroStepQueue): its micro-steps are pending as groups arrive, so the
// core trains while the batch is still being generated, and the same steps end sooner than when
// a step's one micro-step waits for its whole batch (a token budget larger than any batch).
TEST(SimulatorTest, AStreamingStepTrainsOnItsFirstGroups) {
  // On-policy (η = 0) on one core and one satellite, training a third of the time: the step
  // cannot overlap the next batch's generation, so only streaming overlaps it with this one's.
  SimConfig streaming = SmallConfig(SimMode::kElastic);
  streaming.run.max_steps = 20;
  streaming.cluster.devices = 2;
  streaming.cluster.bf16_flops = 5e13;
  streaming.learner.max_staleness = 0;
  streaming.learner.token_budget = 16'384;
  absl::StatusOr<SimResult> streamed = Simulate(streaming);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  int64_t micro_steps = 0;
  for (const nlohmann::json& line : streamed->metrics) {
    micro_steps += line["micro_steps"].get<int64_t>();
  }
  ASSERT_GT(micro_steps, 2 * static_cast<int64_t>(streamed->metrics.size()));
  SimConfig whole = streaming;
  whole.learner.token_budget = 1'000'000'000;
  absl::StatusOr<SimResult> batched = Simulate(whole);
  ASSERT_TRUE(batched.ok()) << batched.status();
  const double t_streamed = streamed->metrics.back()["elapsed_s"].get<double>();
  const double t_batched = batched->metrics.back()["elapsed_s"].get<double>();
  EXPECT_LT(t_streamed, 0.95 * t_batched)
      << "streamed " << t_streamed << " s, whole batches " << t_batched << " s";
}

// The async job's admission (scheduler::PipelineAdmission): episodes in flight plus those the
// learner has not taken stay below K batches, counted from the batches the learner took.
TEST(SimulatorTest, PipelineAdmissionBoundsWhatIsInFlight) {
  SimConfig config = SmallConfig(SimMode::kAsync);
  config.run.max_pipeline_batches = 1;
  config.workload.generation.max_batch = 64;  // only admission limits the starts
  absl::StatusOr<SimResult> result = Simulate(config);
  ASSERT_TRUE(result.ok()) << result.status();
  const int64_t batch = config.run.batch_groups * config.run.group_size;
  for (const nlohmann::json& line : result->metrics) {
    EXPECT_LE(line["episodes_in_flight"].get<int64_t>(), batch) << line;
  }
  config.run.max_pipeline_batches = 3;
  absl::StatusOr<SimResult> deeper = Simulate(config);
  ASSERT_TRUE(deeper.ok()) << deeper.status();
  int64_t most = 0;
  for (const nlohmann::json& line : deeper->metrics) {
    most = std::max(most, line["episodes_in_flight"].get<int64_t>());
  }
  EXPECT_GT(most, batch);
  EXPECT_LE(most, 3 * batch);
}

}  // namespace
}  // namespace flywheel::sim
