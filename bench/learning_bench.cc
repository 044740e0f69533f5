// `flywheel bench learning`: the built-in tasks as demonstrations of learning, each from a fresh
// start with its example config on this machine, each final policy evaluated on episodes of its
// own:
//
//   guess        examples/guess.toml, one run per seed (guess_seeds): seconds_to_target = wall
//                seconds at the first step whose trailing `window`-step mean success reaches
//                guess_target (0.9), within guess_seconds
//   calc         examples/calc.toml as shipped (its [sft] warm start on the expert, then RL; the
//                warm start's length calc_sft_steps when given), RL until calc_seconds: seconds
//                to calc_target (0.8) the same way
//   repair       examples/repair.toml as shipped (flat, async: its [sft] warm start on the search
//                expert, of repair_sft_steps when given, then RL until repair_seconds, the warm
//                start included, or repair_steps steps: --quick takes 1 step, 60 s at most);
//                its final success against the warm-started policy's (the same warm start and
//                one RL step, evaluated alike): improvement
//   repair-tree  examples/repair-tree.toml: its imitation once (tree_imitation_steps when
//                given) and tree_arms_start reinforcement steps (1), checkpointed,
//                then from that checkpoint, per seed (tree_seeds), tree_steps steps with
//                tree.packing = tree_packing ("group", the example's: a GRPO group's executions
//                one tree; or "tree": one per execution) and "flat" (both exact weighting: the
//                same gradient), the order alternating over seeds. tree_vs_flat_time_per_step = median over
//                seeds of (tree's median wall seconds per step / flat's); reward_gap = mean
//                over seeds of tree's mean reward per step − flat's; arms_reward_improvement =
//                the tree arms' last-window reward − first-window reward. Both the imitation
//                and the arms keep the example's learning-rate schedule (learner.total_steps).
//                Then `learning`: the example as shipped for tree_seconds (600), its final
//                policy's evaluation against the imitated policy's (the same imitation and one
//                step, evaluated alike): improvement; and the success of its last tenth of
//                steps against its first tenth's (success_improvement).
//
// What limits each task (and what was tried) is in docs/learning.md; a target not reached is
// reported as such (seconds_to_target null), never as the budget.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/registry.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/runtime/embedded_job.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/runtime/tree_job.h"

namespace flywheel::bench {
namespace {

namespace fs = std::filesystem;

struct Run {
  std::vector<nlohmann::json> metrics;
  std::optional<PolicyEvalResult> eval;
};

absl::StatusOr<std::vector<nlohmann::json>> ReadMetrics(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("bench learning: cannot read ", path.string()));
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      return absl::DataLossError(StrCat("bench learning: ", path.string(), ": not JSON: ", line));
    }
    lines.push_back(std::move(j));
  }
  return lines;
}

// An embedded job (async, as shipped) with `overrides`, in runs_dir/name.
absl::StatusOr<Run> RunEmbedded(const std::string& config_file, const fs::path& runs_dir,
                                const std::string& name, std::vector<std::string> overrides) {
  overrides.push_back(StrCat("run.runs_dir=\"", runs_dir.string(), "\""));
  overrides.push_back(StrCat("run.name=\"", name, "\""));
  overrides.push_back("learner.checkpoint_every=0");
  ASSIGN_OR_RETURN(const JobConfig config, LoadJobConfig(config_file, overrides));
  EmbeddedJobOptions options;
  options.progress = nullptr;
  ASSIGN_OR_RETURN(const EmbeddedJobResult result, RunEmbeddedJob(config, options));
  Run run;
  ASSIGN_OR_RETURN(run.metrics, ReadMetrics(runs_dir / name / "metrics.jsonl"));
  run.eval = result.eval;
  return run;
}

// Wall seconds at the first step whose trailing `window`-step mean success reaches `target`.
std::optional<double> SecondsToTarget(const std::vector<nlohmann::json>& lines, size_t window,
                                      double target) {
  double sum = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    sum += lines[i].value("success_rate", 0.0);
    if (i >= window) sum -= lines[i - window].value("success_rate", 0.0);
    if (i + 1 >= window && sum / static_cast<double>(window) >= target) {
      return lines[i].value("elapsed_s", 0.0);
    }
  }
  return std::nullopt;
}

nlohmann::json OrNull(const std::optional<double>& v) {
  return v.has_value() ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json EvalJson(const Run& run) {
  return run.eval.has_value() ? run.eval->ToJson() : nlohmann::json(nullptr);
}

double EvalSuccess(const Run& run) { return run.eval.has_value() ? run.eval->success_rate : 0.0; }

struct Settings {
  fs::path runs_dir;
  std::string examples;
  size_t window = 50;
  int64_t eval_episodes = 256;
};

// One task trained to a success target: per seed, seconds to the target and the evaluation.
absl::StatusOr<nlohmann::json> TargetTask(const Settings& s, const std::string& task,
                                          const std::vector<int64_t>& seeds, double seconds,
                                          double target, std::vector<std::string> overrides) {
  nlohmann::json out = {{"target_success", target},
                        {"budget_seconds", seconds},
                        {"window_steps", s.window},
                        {"seeds", nlohmann::json::array()}};
  std::vector<double> times, finals;  // a seed that never reached the target: +inf
  for (int64_t seed : seeds) {
    std::vector<std::string> o = overrides;
    o.push_back(StrCat("run.seed=", seed));
    o.push_back(StrCat("run.max_wall_seconds=", seconds));
    o.push_back(StrCat("run.eval_episodes=", s.eval_episodes));
    ASSIGN_OR_RETURN(const Run run, RunEmbedded(StrCat(s.examples, "/", task, ".toml"), s.runs_dir,
                                                StrCat(task, "-", seed), o));
    const std::optional<double> t = SecondsToTarget(run.metrics, s.window, target);
    times.push_back(t.value_or(std::numeric_limits<double>::infinity()));
    finals.push_back(EvalSuccess(run));
    out["seeds"].push_back({{"seed", seed},
                            {"seconds_to_target", OrNull(t)},
                            {"steps", run.metrics.size()},
                            {"eval", EvalJson(run)}});
  }
  std::sort(times.begin(), times.end());
  out["reached"] =
      std::count_if(times.begin(), times.end(), [](double t) { return std::isfinite(t); });
  // The median over seeds (the upper one of an even count); null when half or more never
  // reached the target.
  const double median = times[times.size() / 2];
  out["seconds_to_target"] =
      std::isfinite(median) ? nlohmann::json(median) : nlohmann::json(nullptr);
  out["final_success"] = Median(finals);
  return out;
}

// The flat repair task as shipped (its [sft] warm start on the search expert, then RL), against
// the warm-started policy: the same warm start and one RL step, evaluated alike.
absl::StatusOr<nlohmann::json> RepairTask(const Settings& s, int64_t sft_steps, double seconds,
                                          int64_t max_steps) {
  std::vector<std::string> warm = {StrCat("run.eval_episodes=", s.eval_episodes)};
  if (sft_steps > 0) warm.push_back(StrCat("sft.steps=", sft_steps));  // 0: the example's
  const std::string file = s.examples + "/repair.toml";
  std::vector<std::string> o = warm;
  o.push_back("run.max_steps=1");
  ASSIGN_OR_RETURN(const Run start, RunEmbedded(file, s.runs_dir, "repair-warm", o));
  o = warm;
  o.push_back(StrCat("run.max_steps=", max_steps));
  o.push_back(StrCat("run.max_wall_seconds=", seconds));
  ASSIGN_OR_RETURN(const Run trained, RunEmbedded(file, s.runs_dir, "repair-rl", o));
  nlohmann::json out = {{"budget_seconds", seconds},
                        {"steps", trained.metrics.size()},
                        {"warm_start_eval", EvalJson(start)},
                        {"eval", EvalJson(trained)},
                        {"final_success", EvalSuccess(trained)},
                        {"improvement", EvalSuccess(trained) - EvalSuccess(start)},
                        {"target_improvement", 0.15}};
  if (sft_steps > 0) out["sft_steps"] = sft_steps;
  return out;
}

struct TreeArm {
  double seconds_per_step = 0;  // median wall seconds between consecutive steps
  double train_seconds = 0;     // median learner seconds per step
  double reward_mean = 0;       // over the steps
  double first_window = 0, last_window = 0;
};

absl::StatusOr<TreeArm> RunTreeArm(const Settings& s, const std::vector<std::string>& base,
                                   const fs::path& checkpointed, int64_t seed,
                                   const std::string& packing, int64_t start, int64_t steps) {
  const std::string name = StrCat("tree-", packing, "-", seed);
  fs::remove_all(s.runs_dir / name);
  fs::copy(checkpointed, s.runs_dir / name, fs::copy_options::recursive);
  std::vector<std::string> o = base;
  o.push_back(StrCat("run.name=\"", name, "\""));
  o.push_back(StrCat("run.seed=", seed));
  o.push_back(StrCat("run.max_steps=", start + steps));
  o.push_back(StrCat("tree.packing=\"", packing, "\""));
  o.push_back("learner.checkpoint_every=0");
  ASSIGN_OR_RETURN(const JobConfig config, LoadJobConfig(s.examples + "/repair-tree.toml", o));
  TreeJobRunOptions run;
  run.resume = true;
  ASSIGN_OR_RETURN(const TreeJobResult result, RunTreeJob(config, run));
  if (result.metrics.size() < 2) {
    return absl::InternalError(
        StrCat("bench learning: ", name, " trained ", result.metrics.size(), " steps; need >= 2"));
  }
  TreeArm arm;
  std::vector<double> wall, train;
  const size_t n = result.metrics.size();
  const size_t window = std::max<size_t>(1, n / 3);
  for (size_t i = 0; i < n; ++i) {
    const nlohmann::json& m = result.metrics[i];
    const double r = m["reward_mean"].get<double>();
    arm.reward_mean += r / static_cast<double>(n);
    if (i < window) arm.first_window += r / static_cast<double>(window);
    if (i >= n - window) arm.last_window += r / static_cast<double>(window);
    train.push_back(m["train_seconds"].get<double>());
    if (i > 0) {
      wall.push_back(m["elapsed_s"].get<double>() -
                     result.metrics[i - 1]["elapsed_s"].get<double>());
    }
  }
  arm.seconds_per_step = Median(wall);
  arm.train_seconds = Median(train);
  return arm;
}

// The tree job's learning-rate decay spans its imitation and reinforcement steps
// (TreeJobScheduleSteps), so a run with few run.max_steps decays within them. This override keeps
// examples/repair-tree.toml's schedule as TreeLearning runs it (run.max_steps = 100000) with
// `imitation_steps` (0: the example's).
constexpr int64_t kTreeLearningMaxSteps = 100000;
std::string ScheduleOf(const JobConfig& config) {
  return StrCat("learner.total_steps=", TreeJobScheduleSteps(config));
}
absl::StatusOr<std::string> ExampleTreeSchedule(const Settings& s, int64_t imitation_steps) {
  std::vector<std::string> o = {StrCat("run.max_steps=", kTreeLearningMaxSteps)};
  if (imitation_steps > 0) o.push_back(StrCat("tree.imitation_steps=", imitation_steps));
  ASSIGN_OR_RETURN(const JobConfig config, LoadJobConfig(s.examples + "/repair-tree.toml", o));
  return ScheduleOf(config);
}

// The arms start from the checkpoint after the imitation and `start` reinforcement steps (>= 1).
absl::StatusOr<nlohmann::json> TreeTask(const Settings& s, int64_t imitation_steps,
                                        const std::vector<int64_t>& seeds, int64_t start,
                                        int64_t steps, const std::string& packing) {
  // Both arms train at the example's rate: with 1 + steps steps the schedule would decay to
  // its floor within them.
  ASSIGN_OR_RETURN(const std::string schedule, ExampleTreeSchedule(s, imitation_steps));
  const std::vector<std::string> base = {StrCat("run.runs_dir=\"", s.runs_dir.string(), "\""),
                                         "tree.weighting=\"exact\"", schedule};
  std::vector<std::string> o = base;
  o.push_back("run.name=\"tree-imitated\"");
  if (imitation_steps > 0) o.push_back(StrCat("tree.imitation_steps=", imitation_steps));
  o.push_back(StrCat("run.max_steps=", start));
  o.push_back(StrCat("learner.checkpoint_every=", start));
  ASSIGN_OR_RETURN(const JobConfig first, LoadJobConfig(s.examples + "/repair-tree.toml", o));
  ASSIGN_OR_RETURN(const TreeJobResult imitated, RunTreeJob(first, TreeJobRunOptions{}));

  nlohmann::json out = {{"imitation_steps", first.tree.imitation_steps},
                        {"arms_start_step", start},
                        {"steps_per_arm", steps},
                        {"weighting", "exact"},
                        {"tree_packing", packing},
                        {"seeds", nlohmann::json::array()}};
  std::vector<double> time_ratios, train_ratios, gaps, improvements;
  for (size_t k = 0; k < seeds.size(); ++k) {
    std::vector<std::string> order = {packing, "flat"};
    if (k % 2 == 1) std::reverse(order.begin(), order.end());
    std::map<std::string, TreeArm> arms;
    for (const std::string& p : order) {
      ASSIGN_OR_RETURN(arms[p], RunTreeArm(s, base, imitated.run_dir, seeds[k], p, start, steps));
    }
    const TreeArm& tree = arms[packing];
    const TreeArm& flat = arms["flat"];
    time_ratios.push_back(tree.seconds_per_step / flat.seconds_per_step);
    train_ratios.push_back(tree.train_seconds / flat.train_seconds);
    gaps.push_back(tree.reward_mean - flat.reward_mean);
    improvements.push_back(tree.last_window - tree.first_window);
    nlohmann::json seed = {{"seed", seeds[k]}, {"order", order}};
    for (const auto& [name, arm] : arms) {
      seed[name == "flat" ? "flat" : "tree"] = {{"seconds_per_step", arm.seconds_per_step},
                                                {"train_seconds_per_step", arm.train_seconds},
                                                {"reward_mean", arm.reward_mean},
                                                {"first_window_reward", arm.first_window},
                                                {"last_window_reward", arm.last_window}};
    }
    out["seeds"].push_back(seed);
  }
  double gap = 0, improvement = 0;
  for (double g : gaps) gap += g / static_cast<double>(gaps.size());
  for (double i : improvements) improvement += i / static_cast<double>(improvements.size());
  out["tree_vs_flat_time_per_step"] = Median(time_ratios);
  out["tree_vs_flat_train_seconds"] = Median(train_ratios);
  out["reward_gap"] = gap;
  out["arms_reward_improvement"] = improvement;  // last-window reward − first-window, tree arms
  out["reward_at_arms_start"] = imitated.last_reward;  // the checkpointed run's last step
  return out;
}

// examples/repair-tree.toml as shipped (async, its imitation then reinforcement learning) for
// `seconds` of wall time, its final policy evaluated on `eval_episodes` executions, against the
// imitated policy (the same imitation and one reinforcement step, evaluated on the same
// instances): improvement. Also the success of the first and last tenth of its reinforcement
// steps. `imitation_steps` > 0 replaces the example's (--quick).
absl::StatusOr<nlohmann::json> TreeLearning(const Settings& s, double seconds,
                                            int64_t imitation_steps) {
  std::vector<std::string> o = {StrCat("run.runs_dir=\"", s.runs_dir.string(), "\""),
                                StrCat("run.eval_episodes=", s.eval_episodes)};
  if (imitation_steps > 0) o.push_back(StrCat("tree.imitation_steps=", imitation_steps));
  std::vector<std::string> warm = o;
  o.push_back("run.name=\"tree-learning\"");
  o.push_back(StrCat("run.max_steps=", kTreeLearningMaxSteps));
  o.push_back(StrCat("run.max_wall_seconds=", seconds));
  ASSIGN_OR_RETURN(const JobConfig config, LoadJobConfig(s.examples + "/repair-tree.toml", o));

  // The imitated policy on the learning run's schedule, or its imitation would decay within its
  // own 1 + imitation steps.
  warm.push_back("run.name=\"tree-warm\"");
  warm.push_back("run.max_steps=1");
  warm.push_back(ScheduleOf(config));
  ASSIGN_OR_RETURN(const JobConfig warm_config,
                   LoadJobConfig(s.examples + "/repair-tree.toml", warm));
  ASSIGN_OR_RETURN(const TreeJobResult imitated, RunTreeJob(warm_config, TreeJobRunOptions{}));
  ASSIGN_OR_RETURN(const TreeJobResult result, RunTreeJob(config, TreeJobRunOptions{}));
  const size_t n = result.metrics.size();
  if (n < 2 || !result.eval.has_value() || !imitated.eval.has_value()) {
    return absl::InternalError(StrCat("bench learning: the tree job trained ", n, " steps in ",
                                      seconds, " s (need >= 2) or was not evaluated"));
  }
  const size_t window = std::max<size_t>(1, n / 10);
  double first = 0, last = 0;
  for (size_t i = 0; i < window; ++i) {
    first += result.metrics[i]["success_rate"].get<double>() / static_cast<double>(window);
    last += result.metrics[n - 1 - i]["success_rate"].get<double>() / static_cast<double>(window);
  }
  return nlohmann::json{{"budget_seconds", seconds},
                        {"steps", n},
                        {"warm_start_eval", imitated.eval->ToJson()},
                        {"final_eval", result.eval->ToJson()},
                        {"warm_start_success", imitated.eval->success_rate},
                        {"final_success", result.eval->success_rate},
                        {"improvement", result.eval->success_rate - imitated.eval->success_rate},
                        {"window_steps", window},
                        {"success_first_window", first},
                        {"success_last_window", last},
                        {"success_improvement", last - first}};
}

absl::StatusOr<std::vector<int64_t>> Seeds(const BenchArgs& args, const std::string& key,
                                           const std::string& fallback) {
  return ParseIntList(args, key, fallback);
}

}  // namespace

absl::StatusOr<BenchReport> RunLearningBench(const BenchArgs& args) {
  const bool q = args.quick;
  Settings s;
  s.examples = args.GetString("examples", args.source_dir + "/examples");
  s.window = static_cast<size_t>(args.GetInt("window", q ? 5 : 50));
  s.eval_episodes = args.GetInt("eval_episodes", q ? 8 : 256);
  // --param runs_dir=DIR keeps every run (metrics.jsonl, summary.json, checkpoints) for
  // scripts/learning-curves; by default they go to a temporary directory removed at the end.
  const std::string kept_runs = args.GetString("runs_dir", "");
  s.runs_dir = kept_runs.empty()
                   ? fs::temp_directory_path() / StrCat("flywheel_learning_bench_", getpid())
                   : fs::path(kept_runs);
  if (kept_runs.empty()) fs::remove_all(s.runs_dir);
  const std::vector<std::string> tasks =
      absl::StrSplit(args.GetString("tasks", "guess,calc,repair,repair-tree"), ',');

  BenchReport report;
  report.config = {
      {"tasks", tasks},
      {"window_steps", s.window},
      {"eval_episodes", s.eval_episodes},
      {"examples", s.examples},
      {"runs_kept_in", kept_runs.empty() ? nlohmann::json() : nlohmann::json(kept_runs)}};
  report.table = {{"task", "seconds to target", "final success", "note"}};
  for (const std::string& task : tasks) {
    nlohmann::json r;
    if (task == "guess") {
      ASSIGN_OR_RETURN(const std::vector<int64_t> seeds,
                       Seeds(args, "guess_seeds", q ? "1" : "1,2,3"));
      ASSIGN_OR_RETURN(r,
                       TargetTask(s, "guess", seeds, args.GetDouble("guess_seconds", q ? 8 : 120),
                                  args.GetDouble("guess_target", 0.9), {}));
    } else if (task == "calc") {
      std::vector<std::string> o = {"run.max_steps=100000"};
      const int64_t sft = args.GetInt("calc_sft_steps", q ? 3 : 0);  // 0: the example's
      if (sft > 0) o.push_back(StrCat("sft.steps=", sft));
      ASSIGN_OR_RETURN(r, TargetTask(s, "calc", {1}, args.GetDouble("calc_seconds", q ? 8 : 600),
                                     args.GetDouble("calc_target", 0.8), o));
      if (sft > 0) r["sft_steps"] = sft;
    } else if (task == "repair") {
      // --quick: 1 RL step, the budget only a bound (a slow or instrumented build takes longer)
      ASSIGN_OR_RETURN(r, RepairTask(s, args.GetInt("repair_sft_steps", q ? 3 : 0),
                                     args.GetDouble("repair_seconds", q ? 60 : 600),
                                     args.GetInt("repair_steps", q ? 1 : 100000)));
    } else if (task == "repair-tree") {
      ASSIGN_OR_RETURN(const std::vector<int64_t> seeds,
                       Seeds(args, "tree_seeds", q ? "1" : "1,2,3"));
      const int64_t start = args.GetInt("tree_arms_start", 1);
      if (start < 1) {
        return absl::InvalidArgumentError("bench learning: --param tree_arms_start must be >= 1");
      }
      const std::string packing = args.GetString("tree_packing", "group");
      if (packing != "group" && packing != "tree") {
        return absl::InvalidArgumentError(
            StrCat("bench learning: --param tree_packing must be group or tree, not '", packing,
                   "'"));
      }
      ASSIGN_OR_RETURN(r, TreeTask(s, args.GetInt("tree_imitation_steps", q ? 3 : 0), seeds, start,
                                   args.GetInt("tree_steps", q ? 3 : 30), packing));
      ASSIGN_OR_RETURN(r["learning"], TreeLearning(s, args.GetDouble("tree_seconds", q ? 8 : 600),
                                                   q ? 3 : 0));
      r["final_success"] = r["learning"]["final_success"];
      r["improvement"] = r["learning"]["improvement"];
      report.ratios["tree_vs_flat_time_per_step"] = r["tree_vs_flat_time_per_step"];
      report.ratios["tree_reward_gap"] = r["reward_gap"];
    } else {
      return absl::InvalidArgumentError(
          StrCat("bench learning: --param tasks: unknown task '", task,
                 "'; the tasks are guess, calc, repair, repair-tree"));
    }
    report.results[task] = r;
    auto fmt = [](const nlohmann::json& v) {
      return v.is_number() ? absl::StrFormat("%.3g", v.get<double>()) : std::string("-");
    };
    std::string note;
    if (task == "repair") note = StrCat("improvement ", fmt(r["improvement"]));
    if (task == "repair-tree") {
      note = StrCat("tree/flat s per step ", fmt(r["tree_vs_flat_time_per_step"]), ", reward gap ",
                    fmt(r["reward_gap"]), ", improvement ", fmt(r["improvement"]));
    }
    report.table.push_back({task, fmt(r.value("seconds_to_target", nlohmann::json())),
                            fmt(r.value("final_success", nlohmann::json())), note});
  }
  report.summary = StrCat(tasks.size(), " tasks; per-seed figures in the JSON");
  if (kept_runs.empty()) fs::remove_all(s.runs_dir);
  return report;
}

}  // namespace flywheel::bench
