// Where the elastic scheduler pays: one training job on the same cells (model replicas, one
// thread and one intra-op thread each) run three ways:
//
//   colocated    every cell generates its share of a batch, then every cell trains on it (the
//                embedded job with actor.num_actors = C actors and learner.world_size = C
//                ranks, which take turns)
//   async K      a static split: K actor cells generate while C − K learner ranks train, for
//                every K in 1 … C − 1 (the best K is the peer: what a user would tune)
//   elastic      1 core cell and C − 1 satellites moved by the water-level rule, streaming steps
//
// on a workload whose rollouts have heavy-tailed generation lengths (the copy task: answer
// lengths drawn from a bounded Pareto, generated token by token) and environment latency, under
// the same staleness bound η (learner.max_staleness, default 1). Per mode: time to the target
// reward (smoothed as pipeline_curve.h does), trained samples/s, and the final policy's reward
// on the same evaluation episodes; for elastic, the measured switch times in both directions.
// Ratios:
//   speedup_vs_colocated     = colocated time to target / elastic time to target
//   speedup_vs_static_async  = best static split's time to target / elastic's
//   final_reward_gap         = elastic final reward − colocated final reward
// Rounds alternate the order of the modes; each figure is the median over rounds.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include "absl/strings/str_format.h"
#include "bench/cells.h"
#include "bench/pipeline_curve.h"
#include "bench/registry.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/runtime/embedded_job.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel::bench {
namespace {

namespace fs = std::filesystem;

struct ElasticSettings {
  std::string config_file;
  int64_t cells = 2;
  int64_t max_staleness = 1;
  double wall_s = 0;
  int64_t max_steps = 0;
  int64_t eval_episodes = 0;
  int64_t rounds = 1;
  int64_t seed = 1;
  double min_residence_s = 0.05;
  double hysteresis = 0.25;
  int64_t core_cells = 1;  // of the elastic side
  double slowdown = 1;     // run.emulated_slowdown of every side
  // learner.token_budget of every side, and of the elastic side alone (0: the config's). The
  // budget decides how many micro-steps a step has, so how many cells can share one; the update
  // does not depend on it (global token normalisation), so each side may use its best.
  int64_t token_budget = 0;
  int64_t elastic_token_budget = 0;
  CurveOptions curve;
};

// One side of the comparison: the mode and, for async, the split.
struct Side {
  std::string name;
  TrainMode mode = TrainMode::kAsync;
  int64_t rollout_cells = 0;  // async only
};

struct SideResult {
  nlohmann::json json;
  std::optional<double> time_to_target_s;
  double samples_per_s = 0;
  double final_reward = 0;
};

absl::StatusOr<JobConfig> MakeConfig(const ElasticSettings& s, const Side& side, int64_t round,
                                     const fs::path& runs_dir) {
  ASSIGN_OR_RETURN(JobConfig config, LoadJobConfig(s.config_file));
  config.run.runs_dir = runs_dir.string();
  config.run.name = StrCat(side.name, "-r", round);
  config.run.seed = s.seed;
  config.run.max_steps = s.max_steps;
  config.run.max_wall_seconds = s.wall_s;
  config.run.eval_episodes = s.eval_episodes;
  config.run.emulated_slowdown = s.slowdown;
  PlaceOnCells(config, side.mode, s.cells, side.rollout_cells, s.max_staleness);
  if (s.token_budget > 0) config.learner.token_budget = s.token_budget;
  if (side.mode == TrainMode::kElastic) {
    if (s.elastic_token_budget > 0) config.learner.token_budget = s.elastic_token_budget;
    config.scheduler.core_cells = s.core_cells;
    config.scheduler.min_residence_seconds = s.min_residence_s;
    config.scheduler.hysteresis = s.hysteresis;
  }
  RETURN_IF_ERROR(config.Validate());
  return config;
}

absl::StatusOr<SideResult> RunSide(const ElasticSettings& s, const Side& side, int64_t round,
                                   const fs::path& runs_dir) {
  ASSIGN_OR_RETURN(const JobConfig config, MakeConfig(s, side, round, runs_dir));
  EmbeddedJobOptions options;
  options.progress = nullptr;
  ASSIGN_OR_RETURN(const EmbeddedJobResult job, RunEmbeddedJob(config, options));
  const fs::path metrics = fs::path(config.run.runs_dir) / config.run.name / "metrics.jsonl";
  ASSIGN_OR_RETURN(const std::vector<StepPoint> points, ReadStepPoints(metrics.string()));
  const CurveSummary curve = SummariseCurve(points, s.curve);
  const double wall = job.summary.at("wall_seconds").get<double>();
  SideResult r;
  r.time_to_target_s = curve.time_to_target_s;
  r.samples_per_s = wall > 0 ? static_cast<double>(curve.samples) / wall : 0;
  r.final_reward = job.eval.has_value() ? job.eval->reward_mean : curve.final_reward;
  r.json = {
      {"mode", side.name},
      {"round", round},
      {"time_to_target_s", r.time_to_target_s.has_value() ? nlohmann::json(*r.time_to_target_s)
                                                          : nlohmann::json(nullptr)},
      {"samples_per_s", r.samples_per_s},
      {"final_reward", r.final_reward},
      {"final_reward_from", job.eval.has_value() ? "eval" : "batches"},
      {"best_smoothed_reward", curve.best_smoothed_reward},
      {"samples_trained", curve.samples},
      {"steps", curve.steps},
      {"wall_s", wall},
      {"learner_busy_s", curve.busy_s},
  };
  if (job.summary.contains("elastic")) r.json["elastic"] = job.summary.at("elastic");
  return r;
}

// Median time to target over rounds; a round that never reached it counts as
// the wall budget (a lower bound on its time), and the result says how many reached it.
struct Figures {
  double time_to_target_s = 0;
  int64_t reached = 0;
  double samples_per_s = 0;
  double final_reward = 0;
};

Figures Summarise(const std::vector<SideResult>& runs, double wall_s) {
  std::vector<double> ttt, sps, reward;
  Figures f;
  for (const SideResult& r : runs) {
    ttt.push_back(r.time_to_target_s.value_or(wall_s));
    f.reached += r.time_to_target_s.has_value();
    sps.push_back(r.samples_per_s);
    reward.push_back(r.final_reward);
  }
  f.time_to_target_s = Median(ttt);
  f.samples_per_s = Median(sps);
  f.final_reward = Median(reward);
  return f;
}

}  // namespace

absl::StatusOr<BenchReport> RunElasticBench(const BenchArgs& args) {
  ElasticSettings s;
  s.config_file = args.GetString("config", args.source_dir + "/examples/copy.toml");
  s.cells = args.GetInt("cells", 2);
  s.max_staleness = args.GetInt("max_staleness", 1);
  s.wall_s = args.GetDouble("wall_s", args.quick ? 20 : 240);
  s.max_steps = args.GetInt("max_steps", 100000);
  s.eval_episodes = args.GetInt("eval_episodes", args.quick ? 16 : 512);
  s.rounds = args.GetInt("rounds", 1);
  s.seed = args.GetInt("seed", 1);
  // Well below a learner step here (~0.6 s): a residence longer than a step keeps a satellite
  // training after the next batch is demanded, and generation waits for it.
  s.min_residence_s = args.GetDouble("min_residence_s", 0.05);
  s.hysteresis = args.GetDouble("hysteresis", 0.25);
  s.core_cells = args.GetInt("core_cells", 1);
  // More cells than cores: emulate devices this many times slower than a core (each cell then
  // needs 1/slowdown of a core), e.g. cells=4 slowdown=2 on 2 cores.
  s.slowdown = args.GetDouble("slowdown", 1);
  s.token_budget = args.GetInt("token_budget", 0);
  s.elastic_token_budget = args.GetInt("elastic_token_budget", 0);
  s.curve.target_reward = args.GetDouble("target", 0.5);
  s.curve.smooth_steps = args.GetInt("smooth_steps", 5);
  s.curve.final_steps = args.GetInt("final_steps", 10);
  if (s.cells < 2) {
    return absl::InvalidArgumentError(
        StrCat("elastic: --param cells=", s.cells, ": the comparison needs >= 2 cells"));
  }
  if (s.rounds < 1) return absl::InvalidArgumentError("elastic: --param rounds must be >= 1");

  std::vector<Side> sides = {{"colocated", TrainMode::kColocated, 0},
                             {"elastic", TrainMode::kElastic, 0}};
  for (int64_t k = 1; k < s.cells; ++k) {
    sides.push_back({StrCat("async-k", k), TrainMode::kAsync, k});
  }
  const fs::path runs_dir = fs::temp_directory_path() / StrCat("flywheel_elastic_bench_", getpid());
  fs::remove_all(runs_dir);
  std::map<std::string, std::vector<SideResult>> results;
  for (int64_t round = 0; round < s.rounds; ++round) {
    std::vector<Side> order = sides;
    if (round % 2 == 1) std::reverse(order.begin(), order.end());
    for (const Side& side : order) {
      ASSIGN_OR_RETURN(SideResult r, RunSide(s, side, round, runs_dir));
      results[side.name].push_back(std::move(r));
    }
  }
  fs::remove_all(runs_dir);

  BenchReport report;
  report.config = {{"config", s.config_file},
                   {"cells", s.cells},
                   {"max_staleness", s.max_staleness},
                   {"wall_s", s.wall_s},
                   {"eval_episodes", s.eval_episodes},
                   {"rounds", s.rounds},
                   {"seed", s.seed},
                   {"min_residence_s", s.min_residence_s},
                   {"hysteresis", s.hysteresis},
                   {"core_cells", s.core_cells},
                   {"emulated_slowdown", s.slowdown},
                   {"token_budget", s.token_budget},
                   {"elastic_token_budget", s.elastic_token_budget},
                   {"target_reward", s.curve.target_reward},
                   {"smooth_steps", s.curve.smooth_steps},
                   {"threads_per_cell", 1}};
  report.table.push_back({"mode", "time to target s", "reached", "samples/s", "final reward"});
  std::map<std::string, Figures> figures;
  for (const Side& side : sides) {
    const Figures f = Summarise(results[side.name], s.wall_s);
    figures[side.name] = f;
    nlohmann::json runs = nlohmann::json::array();
    for (const SideResult& r : results[side.name]) runs.push_back(r.json);
    report.results[side.name] = {{"time_to_target_s", f.time_to_target_s},
                                 {"rounds_reaching_target", f.reached},
                                 {"samples_per_s", f.samples_per_s},
                                 {"final_reward", f.final_reward},
                                 {"runs", runs}};
    report.table.push_back(
        {side.name, absl::StrFormat("%.1f", f.time_to_target_s), StrCat(f.reached, "/", s.rounds),
         absl::StrFormat("%.1f", f.samples_per_s), absl::StrFormat("%.3f", f.final_reward)});
  }
  std::string best_async;
  for (const Side& side : sides) {
    if (side.mode != TrainMode::kAsync) continue;
    if (best_async.empty() ||
        figures[side.name].time_to_target_s < figures[best_async].time_to_target_s) {
      best_async = side.name;
    }
  }
  const Figures& elastic = figures["elastic"];
  const Figures& colocated = figures["colocated"];
  const Figures& async = figures[best_async];
  const double vs_colocated = colocated.time_to_target_s / std::max(1e-9, elastic.time_to_target_s);
  const double vs_async = async.time_to_target_s / std::max(1e-9, elastic.time_to_target_s);
  const double gap = elastic.final_reward - colocated.final_reward;
  nlohmann::json to_train = nlohmann::json::array(), to_rollout = nlohmann::json::array();
  std::vector<double> train_p50, train_max, rollout_p50, rollout_max;
  for (const SideResult& r : results["elastic"]) {
    const nlohmann::json& e = r.json.at("elastic");
    train_p50.push_back(e["to_train"]["p50_s"].get<double>());
    train_max.push_back(e["to_train"]["max_s"].get<double>());
    rollout_p50.push_back(e["to_rollout"]["p50_s"].get<double>());
    rollout_max.push_back(e["to_rollout"]["max_s"].get<double>());
  }
  const double worst_switch = std::max(*std::max_element(train_max.begin(), train_max.end()),
                                       *std::max_element(rollout_max.begin(), rollout_max.end()));
  report.ratios = {
      {"speedup_vs_colocated", vs_colocated},
      {"speedup_vs_static_async", vs_async},
      {"best_static_split", best_async},
      {"final_reward_gap", gap},
      {"switch_seconds",
       {{"to_train", {{"p50", Median(train_p50)}, {"max", Median(train_max)}}},
        {"to_rollout", {{"p50", Median(rollout_p50)}, {"max", Median(rollout_max)}}}}},
      {"goals",
       {{"speedup_vs_colocated", vs_colocated >= 1.5},
        {"speedup_vs_static_async", vs_async >= 1.2},
        {"final_reward_within_0_02", std::abs(gap) <= 0.02},
        {"switch_max_le_1s", worst_switch <= 1.0}}},
  };
  report.summary = absl::StrFormat(
      "time to reward %.2f %.2fx faster than colocated (goal 1.5), %.2fx than the best static "
      "split (%s, goal 1.2); final reward gap %+.3f (goal within 0.02); slowest switch %.3f s",
      s.curve.target_reward, vs_colocated, vs_async, best_async, gap, worst_switch);
  return report;
}

}  // namespace flywheel::bench
