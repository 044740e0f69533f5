// Where decoupling pays: the same training job (the guess task of examples/guess.toml: its model,
// environment, learner and seeds) run to the same budget of trained samples in
//   (a) async:     actors generate continuously; the learner trains on whatever is ready
//   (b) colocated: the synchronous baseline: generate one batch, train on it, repeat
// with an environment whose per-step latency is lognormal (heavy tail: p99 = median ·
// exp(2.326 · sigma), ≥ 10x the median for sigma ≥ 0.99). Per mode it reports
//   learner_utilization = learner busy seconds / wall seconds
//   samples_per_s       = trained samples / wall seconds
//   time_to_target_s    = wall seconds until the smoothed reward first reaches `target`
//                         (pipeline_curve.h says how it is smoothed); null when never
//   final_reward        = mean reward of the final policy, evaluated on `eval_episodes`
//                         episodes that are the same for both modes (policy_eval.h)
// and speedup_samples, speedup_time_to_target = async / colocated (time: colocated / async).
// --param device=cuda --param dtype=bfloat16 place both modes' model (model.device, model.dtype;
// docs/gpu.md).
// The colocated peer over-samples (run.oversample, kOversample below): it starts more groups
// than a batch and drops the slowest, as a competent synchronous user would.
// The comparison runs on `seeds` seeds (3 to 5 by default: the constants were tuned on others),
// the two modes alternating which runs first; every per-mode figure is the mean over seeds
// (one run's final reward varies by a few hundredths from seed to seed) and the speedups are
// also given per seed with their median.
// Then it sweeps the latency median over `medians` and reports the same speedups at each.
//
// Observability's cost: the main setting's async job run `observability_rounds` times with
// everything a user turns on to watch it — the trace recorded (run.trace), Prometheus metrics
// served and scraped every second, the live dashboard served and its data fetched every
// `kRefreshSeconds` as the page does — and as many times without, the two sides alternating
// which goes first. observability_overhead = 1 − median samples/s on / median samples/s off.
//
// Episodes in flight: async needs enough concurrent episodes that the actors produce samples
// as fast as the learner consumes them (Little's law: in flight = consumption rate × episode
// duration), but every episode in the pipeline (being played or waiting in the buffer) makes
// the data older when it is trained on: the depth of the pipeline in learner batches is about
// the lag in versions. Async runs with admission control (run.max_pipeline_batches =
// `pipeline_batches`): actors start episodes only while the pipeline is shallower than that;
// `in_flight` caps the concurrency. Both modes of one comparison get the same `in_flight`;
// colocated can use at most one batch of it at a time, which is exactly the limitation of the
// synchronous baseline (and on-policy, it never drops stale data). The defaults and the
// trade-off they make (utilisation against reward per sample) are in
// docs/pipeline-benchmark.md.
//
// Numbers are read from what RunEmbeddedJob returns (summary: wall time, latency audit) and from
// the run's metrics.jsonl in a temporary runs directory, removed at the end.

#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "bench/bench.h"
#include "bench/pipeline_curve.h"
#include "bench/registry.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/observe/dashboard.h"
#include "flywheel/observe/metrics_endpoint.h"
#include "flywheel/runtime/embedded_job.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel::bench {
namespace {

namespace fs = std::filesystem;

// z of the 99th percentile of a standard normal: p99 / median of a lognormal = exp(z · sigma).
constexpr double kZ99 = 2.3263478740408408;

// The colocated peer's over-sampling (run.oversample): what a synchronous user does against a
// heavy tail, start more groups than the batch and drop the slowest. Tuned on seeds 6-7, which
// the reported comparison (seeds 3-5) does not use (docs/pipeline-benchmark.md).
constexpr double kOversample = 0.25;

struct PipelineSettings {
  std::string config_file;
  // model.device / model.dtype of both modes (--param device=cuda --param dtype=bfloat16).
  std::vector<std::string> placement;
  int64_t samples = 0;        // trained-sample budget per mode (rounded up to whole steps)
  int64_t sweep_samples = 0;  // the same for each sweep point
  double target = 0;
  double median_ms = 0;  // the heavy-tail comparison
  double sigma = 0;
  std::vector<double> medians;          // the sweep
  std::map<double, int64_t> in_flight;  // median -> episodes in flight per actor
  int64_t num_actors = 1;
  int64_t max_staleness = 8;      // async's bound for every setting; -1 = none
  double pipeline_batches = 2.5;  // async admission: run.max_pipeline_batches (0 = off)
  double oversample = 0;          // colocated: run.oversample (its peer's over-sampling)
  int64_t buffer_groups = 128;    // buffer.max_size: the reservoir that absorbs a fast learner step
  int64_t batch_groups = 64;      // run.batch_groups: groups per learner step
  int64_t observability_samples = 0;  // per run of the observability comparison; 0 = skip it
  int64_t observability_rounds = 0;
  int64_t seed = 1;
  int64_t seeds = 1;          // the main comparison is repeated with seeds seed .. seed+seeds-1
  int64_t eval_episodes = 0;  // the main comparison's final policies are evaluated on these
  CurveOptions curve;
  double max_wall_s = 0;  // safety cap per run; 0 = none
  bool keep_runs = false;
};

absl::StatusOr<std::vector<double>> ParseList(const std::string& key, const std::string& text) {
  std::vector<double> values;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      size_t used = 0;
      values.push_back(std::stod(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      return absl::InvalidArgumentError(
          StrCat("--param ", key, "=", text, ": '", item, "' is not a number"));
    }
  }
  return values;  // empty: no sweep
}

// "0:32,50:256": median -> episodes in flight; a median not listed takes the next larger one's
// value (or the largest listed).
absl::StatusOr<std::map<double, int64_t>> ParseInFlight(const std::string& text) {
  std::map<double, int64_t> table;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t colon = item.find(':');
    try {
      if (colon == std::string::npos) throw std::invalid_argument(item);
      const int64_t n = std::stoll(item.substr(colon + 1));
      if (n < 1) throw std::invalid_argument(item);
      table[std::stod(item.substr(0, colon))] = n;
    } catch (const std::exception&) {
      return absl::InvalidArgumentError(StrCat("--param in_flight=", text, ": '", item,
                                               "' is not MEDIAN_MS:EPISODES (EPISODES >= 1)"));
    }
  }
  if (table.empty()) return absl::InvalidArgumentError("--param in_flight is empty");
  return table;
}

int64_t InFlightFor(const PipelineSettings& s, double median) {
  auto it = s.in_flight.lower_bound(median);
  return it != s.in_flight.end() ? it->second : s.in_flight.rbegin()->second;
}

// BenchArgs' getters throw on a value that is not a number; this names the key instead.
template <typename T, typename Get>
absl::Status Param(const BenchArgs& args, const std::string& key, T fallback, Get get, T& out) {
  try {
    out = (args.*get)(key, fallback);
    return absl::OkStatus();
  } catch (const std::exception&) {
    return absl::InvalidArgumentError(
        StrCat("--param ", key, "=", args.GetString(key, ""), ": not a number"));
  }
}

absl::StatusOr<PipelineSettings> ParseSettings(const BenchArgs& args) {
  PipelineSettings s;
  const bool q = args.quick;
  s.config_file = args.GetString("config", args.source_dir + "/examples/guess.toml");
  s.placement = {StrCat("model.device=\"", args.GetString("device", "cpu"), "\""),
                 StrCat("model.dtype=\"", args.GetString("dtype", "float32"), "\"")};
  RETURN_IF_ERROR(Param(args, "samples", int64_t{q ? 64 : 51200}, &BenchArgs::GetInt, s.samples));
  RETURN_IF_ERROR(
      Param(args, "sweep_samples", int64_t{q ? 32 : 7680}, &BenchArgs::GetInt, s.sweep_samples));
  // guess.toml pays 1 for finding the number plus 0.9 x the share of the range ruled out, so
  // an untrained policy's mean reward is about 0.9 and 1.1 is about 0.35 success.
  RETURN_IF_ERROR(Param(args, "target", 1.1, &BenchArgs::GetDouble, s.target));
  // 512 episodes per step (guess.toml: 128; the quick run: 16). The pipeline that feeds the
  // learner spans an episode's duration; counted in learner versions, that is the duration over
  // the step time, so a bigger batch keeps the same pipeline fewer versions behind.
  RETURN_IF_ERROR(
      Param(args, "batch_groups", int64_t{q ? 2 : 64}, &BenchArgs::GetInt, s.batch_groups));
  RETURN_IF_ERROR(Param(args, "median_ms", 50.0, &BenchArgs::GetDouble, s.median_ms));
  RETURN_IF_ERROR(Param(args, "sigma", 1.0, &BenchArgs::GetDouble, s.sigma));
  ASSIGN_OR_RETURN(s.medians,
                   ParseList("medians", args.GetString("medians", q ? "0,10" : "0,10,50,200")));
  ASSIGN_OR_RETURN(s.in_flight, ParseInFlight(args.GetString(
                                    "in_flight", q ? "0:32" : "0:512,10:512,50:1536,200:2048")));
  RETURN_IF_ERROR(Param(args, "num_actors", int64_t{1}, &BenchArgs::GetInt, s.num_actors));
  RETURN_IF_ERROR(Param(args, "max_staleness", int64_t{8}, &BenchArgs::GetInt, s.max_staleness));
  RETURN_IF_ERROR(Param(args, "buffer_groups", int64_t{128}, &BenchArgs::GetInt, s.buffer_groups));
  RETURN_IF_ERROR(Param(args, "pipeline_batches", 2.5, &BenchArgs::GetDouble, s.pipeline_batches));
  RETURN_IF_ERROR(Param(args, "oversample", kOversample, &BenchArgs::GetDouble, s.oversample));
  RETURN_IF_ERROR(Param(args, "seed", int64_t{q ? 1 : 3}, &BenchArgs::GetInt, s.seed));
  RETURN_IF_ERROR(Param(args, "observability_samples", int64_t{q ? 64 : 12800}, &BenchArgs::GetInt,
                        s.observability_samples));
  RETURN_IF_ERROR(Param(args, "observability_rounds", int64_t{q ? 1 : 3}, &BenchArgs::GetInt,
                        s.observability_rounds));
  RETURN_IF_ERROR(Param(args, "seeds", int64_t{q ? 2 : 3}, &BenchArgs::GetInt, s.seeds));
  RETURN_IF_ERROR(
      Param(args, "eval_episodes", int64_t{q ? 32 : 8192}, &BenchArgs::GetInt, s.eval_episodes));
  RETURN_IF_ERROR(
      Param(args, "smooth_steps", int64_t{q ? 1 : 10}, &BenchArgs::GetInt, s.curve.smooth_steps));
  RETURN_IF_ERROR(
      Param(args, "final_steps", int64_t{q ? 2 : 10}, &BenchArgs::GetInt, s.curve.final_steps));
  RETURN_IF_ERROR(Param(args, "max_wall_s", 1800.0, &BenchArgs::GetDouble, s.max_wall_s));
  int64_t keep_runs = 0;
  RETURN_IF_ERROR(Param(args, "keep_runs", int64_t{0}, &BenchArgs::GetInt, keep_runs));
  s.keep_runs = keep_runs != 0;
  s.curve.target_reward = s.target;
  if (s.samples < 1 || s.sweep_samples < 1) {
    return absl::InvalidArgumentError("--param samples and sweep_samples must be >= 1");
  }
  if (!(s.sigma >= 0) || s.median_ms < 0) {
    return absl::InvalidArgumentError("--param sigma and median_ms must be >= 0");
  }
  for (double m : s.medians) {
    if (m < 0) return absl::InvalidArgumentError("--param medians: every median must be >= 0");
  }
  if (s.max_staleness < -1) {
    return absl::InvalidArgumentError("--param max_staleness must be >= 0, or -1 for no bound");
  }
  if (s.eval_episodes < 0) return absl::InvalidArgumentError("--param eval_episodes must be >= 0");
  if (s.buffer_groups < 1 || s.batch_groups < 1) {
    return absl::InvalidArgumentError("--param buffer_groups and batch_groups must be >= 1");
  }
  if (!(s.oversample >= 0)) return absl::InvalidArgumentError("--param oversample must be >= 0");
  if (!(s.pipeline_batches >= 0)) {
    return absl::InvalidArgumentError("--param pipeline_batches must be >= 0 (0 = off)");
  }
  if (s.seeds < 1) return absl::InvalidArgumentError("--param seeds must be >= 1");
  if (s.observability_samples < 0 || s.observability_rounds < 1) {
    return absl::InvalidArgumentError(
        "--param observability_samples must be >= 0 (0 = skip) and observability_rounds >= 1");
  }
  if (s.num_actors < 1 || s.curve.smooth_steps < 1 || s.curve.final_steps < 1) {
    return absl::InvalidArgumentError(
        "--param num_actors, smooth_steps and final_steps must be >= 1");
  }
  return s;
}

// The latency of one setting: lognormal with this median (mean = median · exp(sigma²/2), the
// model's knob), or none at median 0.
nlohmann::json LatencyJson(double median_ms, double sigma) {
  if (median_ms <= 0) return {{"model", "none"}, {"median_ms", 0}};
  return {{"model", "lognormal"},
          {"median_ms", median_ms},
          {"sigma", sigma},
          {"mean_ms", median_ms * std::exp(sigma * sigma / 2)},
          {"p99_ms", median_ms * std::exp(kZ99 * sigma)},
          {"p99_over_median", std::exp(kZ99 * sigma)}};
}

struct Setting {
  double median_ms = 0;
  int64_t samples = 0;
  int64_t episodes_in_flight = 0;
  int64_t eval_episodes = 0;  // 0: final_reward is that of the last batches
  int64_t seed = 1;
  bool observed = false;  // trace, metrics and dashboard on, and read while the job runs
  int64_t round = 0;      // the observability comparison's round, for the run's name
};

absl::StatusOr<JobConfig> MakeConfig(const PipelineSettings& s, const Setting& setting,
                                     TrainMode mode, const fs::path& runs_dir) {
  ASSIGN_OR_RETURN(JobConfig config, LoadJobConfig(s.config_file, s.placement));
  config.run.mode = mode;
  config.run.runs_dir = runs_dir.string();
  config.run.name =
      StrCat(mode == TrainMode::kAsync ? "async" : "colocated", "-",
             static_cast<int64_t>(std::lround(setting.median_ms)), "ms-s", setting.seed);
  if (setting.round > 0) {
    config.run.name += StrCat(setting.observed ? "-observed-r" : "-plain-r", setting.round);
  }
  config.run.trace = setting.observed;
  config.run.seed = setting.seed;
  config.run.batch_groups = s.batch_groups;
  const int64_t batch = config.run.batch_groups * config.actor.group_size;
  config.run.max_steps = (setting.samples + batch - 1) / batch;
  config.run.max_wall_seconds = s.max_wall_s;
  config.learner.checkpoint_every = 0;  // checkpoint I/O is not what is compared
  config.actor.num_actors = s.num_actors;
  config.actor.episodes_in_flight = setting.episodes_in_flight;
  config.learner.max_staleness = s.max_staleness;
  config.buffer.max_size = s.buffer_groups;
  config.run.max_pipeline_batches = s.pipeline_batches;  // async only
  config.run.oversample = mode == TrainMode::kColocated ? s.oversample : 0;
  config.run.eval_episodes = setting.eval_episodes;
  if (setting.median_ms <= 0) {
    config.env.latency = LatencyOptions{};
  } else {
    config.env.latency.model = LatencyKind::kLognormal;
    config.env.latency.sigma = s.sigma;
    config.env.latency.mean_ms = setting.median_ms * std::exp(s.sigma * s.sigma / 2);
  }
  RETURN_IF_ERROR(config.Validate());
  return config;
}

// What watches an observed run: its metrics endpoint scraped every second (Prometheus' default
// is 15 s; a dashboard-heavy setup scrapes faster), its dashboard's data fetched as often as the
// live page fetches it, from a thread of their own, as a Prometheus and a browser would.
class Observers {
 public:
  static absl::StatusOr<Observers> Start(const fs::path& run_dir) {
    Observers o;
    ASSIGN_OR_RETURN(o.metrics_, ServeMetrics("127.0.0.1:0"));
    ASSIGN_OR_RETURN(o.dashboard_, StartDashboard("127.0.0.1:0", run_dir));
    o.stop_ = std::make_unique<std::atomic<bool>>(false);
    o.thread_ = std::thread([metrics = o.metrics_->address(), dashboard = o.dashboard_->address(),
                             stop = o.stop_.get()] { Poll(metrics, dashboard, *stop); });
    return o;
  }
  Observers() = default;
  Observers(Observers&&) = default;
  Observers& operator=(Observers&&) = default;
  ~Observers() {
    if (thread_.joinable()) {
      stop_->store(true);
      thread_.join();
    }
  }

 private:
  static void Poll(const std::string& metrics, const std::string& dashboard,
                   const std::atomic<bool>& stop) {
    auto client = [](const std::string& address) {
      const size_t colon = address.rfind(':');
      return std::make_unique<httplib::Client>(address.substr(0, colon),
                                               std::stoi(address.substr(colon + 1)));
    };
    auto scraper = client(metrics), page = client(dashboard);
    absl::Time next_scrape = absl::Now(), next_fetch = absl::Now();
    while (!stop.load()) {
      const absl::Time now = absl::Now();
      if (now >= next_scrape) {
        scraper->Get("/metrics");
        next_scrape = now + absl::Seconds(1);
      }
      if (now >= next_fetch) {
        page->Get("/data.json");
        next_fetch = now + absl::Seconds(kDashboardRefreshSeconds);
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  std::unique_ptr<HttpEndpoint> metrics_, dashboard_;
  std::unique_ptr<std::atomic<bool>> stop_;
  std::thread thread_;
};

struct ModeResult {
  nlohmann::json json;
  double samples_per_s = 0;
  std::optional<double> time_to_target_s;
  double utilization = 0;
  double final_reward = 0;
  double final_reward_sd = 0;  // over seeds (MeanOverSeeds)
};

absl::StatusOr<ModeResult> RunMode(const PipelineSettings& s, const Setting& setting,
                                   TrainMode mode, const fs::path& runs_dir) {
  ASSIGN_OR_RETURN(const JobConfig config, MakeConfig(s, setting, mode, runs_dir));
  EmbeddedJobOptions options;
  options.progress = nullptr;
  std::optional<Observers> observers;
  if (setting.observed) {
    ASSIGN_OR_RETURN(observers.emplace(),
                     Observers::Start(fs::path(config.run.runs_dir) / config.run.name));
  }
  ASSIGN_OR_RETURN(const EmbeddedJobResult job, RunEmbeddedJob(config, options));
  observers.reset();
  const fs::path metrics = fs::path(config.run.runs_dir) / config.run.name / "metrics.jsonl";
  ASSIGN_OR_RETURN(const std::vector<StepPoint> points, ReadStepPoints(metrics.string()));
  const CurveSummary curve = SummariseCurve(points, s.curve);

  const nlohmann::json& audit = job.summary.at("latency_audit");
  const double wall = job.summary.at("wall_seconds").get<double>();
  ModeResult r;
  r.utilization = wall > 0 ? audit.at("learner_busy_seconds").get<double>() / wall : 0;
  r.samples_per_s = wall > 0 ? static_cast<double>(curve.samples) / wall : 0;
  r.time_to_target_s = curve.time_to_target_s;
  // The final policy's evaluation when there is one: the same episodes for both modes, and the
  // policy itself rather than the batches it was trained on (a few versions older in async).
  r.final_reward = job.eval.has_value() ? job.eval->reward_mean : curve.final_reward;
  r.json = {
      {"mode", mode == TrainMode::kAsync ? "async" : "colocated"},
      {"learner_utilization", r.utilization},
      {"samples_per_s", r.samples_per_s},
      {"time_to_target_s", r.time_to_target_s.has_value() ? nlohmann::json(*r.time_to_target_s)
                                                          : nlohmann::json(nullptr)},
      {"target_step", curve.target_step.has_value() ? nlohmann::json(*curve.target_step)
                                                    : nlohmann::json(nullptr)},
      {"final_reward", r.final_reward},
      {"final_reward_from", job.eval.has_value() ? "eval" : "batches"},
      {"final_batch_reward", curve.final_reward},
      {"eval", job.eval.has_value() ? job.eval->ToJson() : nlohmann::json(nullptr)},
      {"first_smoothed_reward", curve.first_smoothed_reward},
      {"best_smoothed_reward", curve.best_smoothed_reward},
      {"samples_trained", curve.samples},
      {"budget_met", curve.samples >= setting.samples},
      {"steps", curve.steps},
      {"wall_s", wall},
      {"learner_busy_s", audit.at("learner_busy_seconds")},
      {"learner_wait_s", audit.at("learner_wait_seconds")},
      {"episodes_in_flight", setting.episodes_in_flight},
      {"episodes_finished", job.summary.at("episodes_finished")},
      // Generation spent per trained sample: async discards what went stale (and ends with some
      // in the buffer); colocated trains everything it generates.
      {"episodes_per_trained_sample",
       curve.samples > 0
           ? job.summary.at("episodes_finished").get<double>() / static_cast<double>(curve.samples)
           : 0.0},
      {"latency_audit", audit},
  };
  if (job.summary.contains("oversample")) r.json["oversample"] = job.summary.at("oversample");
  return r;
}

nlohmann::json Ratio(double num, double den) {
  return den > 0 ? nlohmann::json(num / den) : nlohmann::json(nullptr);
}

struct Comparison {
  Setting setting;
  bool colocated_first = false;
  ModeResult async, colocated;
  nlohmann::json speedup_samples, speedup_time_to_target;

  void SetSpeedups() {
    speedup_samples = Ratio(async.samples_per_s, colocated.samples_per_s);
    speedup_time_to_target =
        async.time_to_target_s.has_value() && colocated.time_to_target_s.has_value()
            ? Ratio(*colocated.time_to_target_s, *async.time_to_target_s)
            : nlohmann::json(nullptr);
  }

  nlohmann::json ToJson(double sigma) const {
    return {{"median_ms", setting.median_ms},
            {"latency", LatencyJson(setting.median_ms, sigma)},
            {"episodes_in_flight", setting.episodes_in_flight},
            {"samples_budget", setting.samples},
            {"first", colocated_first ? "colocated" : "async"},
            {"async", async.json},
            {"colocated", colocated.json},
            {"speedup_samples", speedup_samples},
            {"speedup_time_to_target", speedup_time_to_target}};
  }
};

// Both modes on the same configuration and seed; the caller alternates which goes first, so that
// neither always runs on a machine the other has just warmed (or heated).
absl::StatusOr<Comparison> Compare(const PipelineSettings& s, const Setting& setting,
                                   bool colocated_first, const fs::path& runs_dir) {
  Comparison c;
  c.setting = setting;
  c.colocated_first = colocated_first;
  const fs::path dir = runs_dir / StrCat("m", static_cast<int64_t>(std::lround(setting.median_ms)),
                                         "-n", setting.samples);
  for (const TrainMode mode : colocated_first
                                  ? std::vector{TrainMode::kColocated, TrainMode::kAsync}
                                  : std::vector{TrainMode::kAsync, TrainMode::kColocated}) {
    ModeResult& side = mode == TrainMode::kAsync ? c.async : c.colocated;
    ASSIGN_OR_RETURN(side, RunMode(s, setting, mode, dir));
  }
  c.SetSpeedups();
  return c;
}

double Square(double x) { return x * x; }

// One mode's figures averaged over seeds: utilisation, samples/s and final reward are means
// (with the final reward's standard deviation); time to target is the mean when every seed
// reached the target, else null. The json keeps every seed's run under "per_seed".
ModeResult MeanOverSeeds(const std::vector<const ModeResult*>& runs) {
  if (runs.size() == 1) return *runs.front();
  ModeResult m;
  const double n = static_cast<double>(runs.size());
  double to_target = 0;
  bool all_reached = true;
  m.json = runs.front()->json;
  m.json["per_seed"] = nlohmann::json::array();
  for (const ModeResult* r : runs) {
    m.utilization += r->utilization / n;
    m.samples_per_s += r->samples_per_s / n;
    m.final_reward += r->final_reward / n;
    all_reached = all_reached && r->time_to_target_s.has_value();
    if (r->time_to_target_s.has_value()) to_target += *r->time_to_target_s / n;
    m.json["per_seed"].push_back(r->json);
  }
  for (const ModeResult* r : runs) m.final_reward_sd += Square(r->final_reward - m.final_reward);
  m.final_reward_sd = std::sqrt(m.final_reward_sd / (n - 1));
  if (all_reached) m.time_to_target_s = to_target;
  m.json["learner_utilization"] = m.utilization;
  m.json["samples_per_s"] = m.samples_per_s;
  m.json["time_to_target_s"] = all_reached ? nlohmann::json(to_target) : nlohmann::json(nullptr);
  m.json["final_reward"] = m.final_reward;
  m.json["final_reward_sd"] = m.final_reward_sd;
  m.json["seeds"] = runs.size();
  for (const char* per_run : {"target_step", "first_smoothed_reward", "best_smoothed_reward",
                              "final_batch_reward", "eval", "wall_s", "learner_busy_s",
                              "learner_wait_s", "episodes_finished", "latency_audit", "oversample"}) {
    m.json.erase(per_run);  // in per_seed
  }
  return m;
}

Comparison MeanOverSeeds(const std::vector<Comparison>& per_seed) {
  std::vector<const ModeResult*> async, colocated;
  for (const Comparison& c : per_seed) {
    async.push_back(&c.async);
    colocated.push_back(&c.colocated);
  }
  Comparison mean = per_seed.front();
  mean.async = MeanOverSeeds(async);
  mean.colocated = MeanOverSeeds(colocated);
  mean.SetSpeedups();
  return mean;
}

std::string Fixed(double v, int digits) { return fmt::format("{:.{}f}", v, digits); }
std::string Fixed(const nlohmann::json& v, int digits) {
  return v.is_number() ? Fixed(v.get<double>(), digits) : "-";
}
std::string Seconds(const std::optional<double>& v) { return v ? Fixed(*v, 1) : "never"; }

// Observability's cost (the file's header comment): the main setting's async job, observed and
// not, `observability_rounds` times each, alternating which side goes first.
absl::StatusOr<nlohmann::json> MeasureObservability(const PipelineSettings& s,
                                                    const fs::path& runs_dir) {
  std::vector<double> plain, observed;
  nlohmann::json rounds = nlohmann::json::array();
  for (int64_t r = 1; r <= s.observability_rounds; ++r) {
    Setting setting{s.median_ms, s.observability_samples, InFlightFor(s, s.median_ms), 0, s.seed};
    setting.round = r;
    double side[2] = {0, 0};  // plain, observed
    for (int k = 0; k < 2; ++k) {
      setting.observed = (k + r) % 2 == 0;  // round 1 observed first, round 2 plain first, …
      ASSIGN_OR_RETURN(const ModeResult m,
                       RunMode(s, setting, TrainMode::kAsync, runs_dir / "observability"));
      side[setting.observed ? 1 : 0] = m.samples_per_s;
    }
    plain.push_back(side[0]);
    observed.push_back(side[1]);
    rounds.push_back({{"round", r},
                      {"plain_samples_per_s", side[0]},
                      {"observed_samples_per_s", side[1]},
                      {"first", r % 2 == 1 ? "observed" : "plain"}});
  }
  const double off = Percentile(plain, 0.5), on = Percentile(observed, 0.5);
  return nlohmann::json{
      {"samples_budget", s.observability_samples},
      {"rounds", rounds},
      {"plain_samples_per_s_median", off},
      {"observed_samples_per_s_median", on},
      {"observability_overhead", off > 0 ? nlohmann::json(1 - on / off) : nlohmann::json(nullptr)},
      {"observed_with",
       "run.trace = true; /metrics served and scraped every 1 s; the dashboard served and "
       "/data.json fetched every " +
           std::to_string(kDashboardRefreshSeconds) + " s"}};
}

void AddRows(const std::string& label, const Comparison& c,
             std::vector<std::vector<std::string>>& table) {
  for (const ModeResult* r : {&c.async, &c.colocated}) {
    table.push_back({label, r->json["mode"].get<std::string>(),
                     std::to_string(c.setting.episodes_in_flight), Fixed(r->utilization, 3),
                     Fixed(r->samples_per_s, 1), Seconds(r->time_to_target_s),
                     Fixed(r->final_reward, 3), Fixed(r->json["episodes_per_trained_sample"], 2)});
  }
  table.push_back({"", "speedup", "", "", Fixed(c.speedup_samples, 2),
                   Fixed(c.speedup_time_to_target, 2), "", ""});
}

}  // namespace

absl::StatusOr<BenchReport> RunPipelineBench(const BenchArgs& args) {
  ASSIGN_OR_RETURN(const PipelineSettings s, ParseSettings(args));
  ASSIGN_OR_RETURN(const JobConfig base, LoadJobConfig(s.config_file, s.placement));
  const fs::path runs_dir = fs::temp_directory_path() /
                            StrCat("flywheel_pipeline_bench_", static_cast<int64_t>(getpid()));
  fs::remove_all(runs_dir);

  BenchReport report;
  const int64_t batch = base.run.batch_groups * base.actor.group_size;
  report.config = {
      {"task", "guess"},
      {"config_file", s.config_file},
      {"device", base.model.device},
      {"dtype", base.model.dtype},
      {"model",
       {{"hidden_size", base.model.hidden_size},
        {"num_layers", base.model.num_layers},
        {"num_heads", base.model.num_heads},
        {"max_seq_len", base.model.max_seq_len}}},
      {"env",
       {{"kind", "guess"},
        {"range", base.env.guess.range},
        {"max_guesses", base.env.guess.max_guesses}}},
      {"latency", LatencyJson(s.median_ms, s.sigma)},
      {"num_actors", s.num_actors},
      {"episodes_in_flight", InFlightFor(s, s.median_ms)},
      {"in_flight_by_median", nlohmann::json::object()},
      {"batch_trajectories", batch},
      {"samples_budget", s.samples},
      {"sweep_samples_budget", s.sweep_samples},
      {"steps", (s.samples + batch - 1) / batch},
      {"target_reward", s.target},
      {"smoothing", StrCat("sample-weighted mean of reward_mean over the last ",
                           s.curve.smooth_steps, " learner steps (full windows only)")},
      {"final_steps", s.curve.final_steps},
      {"eval_episodes", s.eval_episodes},
      {"seed", s.seed},
      {"seeds", s.seeds},
      {"max_staleness", s.max_staleness},
      {"buffer_max_size_groups", s.buffer_groups},
      {"max_pipeline_batches", s.pipeline_batches},
      {"colocated_oversample", s.oversample},
      {"medians_ms", s.medians},
      {"quick", args.quick},
  };
  for (double m : s.medians) {
    report.config["in_flight_by_median"][Fixed(m, 0)] = InFlightFor(s, m);
  }

  std::vector<Comparison> per_seed;
  for (int64_t k = 0; k < s.seeds; ++k) {
    ASSIGN_OR_RETURN(Comparison c, Compare(s,
                                           {s.median_ms, s.samples, InFlightFor(s, s.median_ms),
                                            s.eval_episodes, s.seed + k},
                                           /*colocated_first=*/k % 2 == 1, runs_dir));
    per_seed.push_back(std::move(c));
  }
  const Comparison main = MeanOverSeeds(per_seed);
  report.results["async"] = main.async.json;
  report.results["colocated"] = main.colocated.json;
  report.ratios["speedup_samples"] = main.speedup_samples;
  report.ratios["speedup_time_to_target"] = main.speedup_time_to_target;
  report.ratios["final_reward_gap"] = main.async.final_reward - main.colocated.final_reward;
  // Each seed's own ratios and their median: one slow or lucky seed does not move it.
  std::vector<double> samples_ratios, target_ratios;
  for (const Comparison& c : per_seed) {
    if (c.speedup_samples.is_number()) samples_ratios.push_back(c.speedup_samples.get<double>());
    if (c.speedup_time_to_target.is_number()) {
      target_ratios.push_back(c.speedup_time_to_target.get<double>());
    }
  }
  report.ratios["speedup_samples_by_seed"] = samples_ratios;
  report.ratios["speedup_time_to_target_by_seed"] = target_ratios;
  report.ratios["speedup_samples_median"] = samples_ratios.empty()
                                                ? nlohmann::json(nullptr)
                                                : nlohmann::json(Percentile(samples_ratios, 0.5));
  // Null unless every seed reached the target in both modes.
  report.ratios["speedup_time_to_target_median"] =
      target_ratios.size() == per_seed.size() ? nlohmann::json(Percentile(target_ratios, 0.5))
                                              : nlohmann::json(nullptr);
  if (s.seeds > 1) {
    // The gap's standard error from the seed-to-seed spread of each mode's final reward.
    report.ratios["final_reward_gap_stderr"] =
        std::sqrt((Square(main.async.final_reward_sd) + Square(main.colocated.final_reward_sd)) /
                  static_cast<double>(s.seeds));
  }
  report.ratios["targets"] = {
      {"async_learner_utilization_ge_0.95", main.async.utilization >= 0.95},
      {"speedup_time_to_target_ge_2",
       main.speedup_time_to_target.is_number() && main.speedup_time_to_target.get<double>() >= 2.0},
      {"final_reward_within_0.02", main.async.final_reward >= main.colocated.final_reward - 0.02}};

  report.table.push_back({"median_ms", "mode", "in_flight", "util", "samples/s", "to_target_s",
                          "final_reward", "episodes/sample"});
  AddRows(Fixed(s.median_ms, 0) + "*", main, report.table);

  nlohmann::json sweep = nlohmann::json::array();
  nlohmann::json by_median = nlohmann::json::object();
  for (size_t i = 0; i < s.medians.size(); ++i) {
    const double m = s.medians[i];
    ASSIGN_OR_RETURN(const Comparison c,
                     Compare(s, {m, s.sweep_samples, InFlightFor(s, m), 0, s.seed},
                             /*colocated_first=*/i % 2 == 1, runs_dir));
    sweep.push_back(c.ToJson(s.sigma));
    by_median[Fixed(m, 0)] = {{"speedup_samples", c.speedup_samples},
                              {"speedup_time_to_target", c.speedup_time_to_target}};
    AddRows(Fixed(m, 0), c, report.table);
  }
  report.results["sweep"] = sweep;
  report.ratios["speedup_by_median"] = by_median;
  std::optional<double> overhead;
  if (s.observability_samples > 0) {
    ASSIGN_OR_RETURN(const nlohmann::json observability, MeasureObservability(s, runs_dir));
    report.results["observability"] = observability;
    report.ratios["observability_overhead"] = observability["observability_overhead"];
    if (observability["observability_overhead"].is_number()) {
      overhead = observability["observability_overhead"].get<double>();
      report.ratios["targets"]["observability_overhead_le_0.02"] = *overhead <= 0.02;
    }
  }
  if (!s.keep_runs) fs::remove_all(runs_dir);

  std::vector<std::string> per_median;
  for (double m : s.medians) {
    per_median.push_back(
        StrCat(Fixed(m, 0), " ms ", Fixed(by_median[Fixed(m, 0)]["speedup_samples"], 2), "x"));
  }
  report.summary =
      StrCat("median ", s.median_ms, " ms, sigma ", s.sigma, ": async/colocated samples/s ",
             Fixed(main.speedup_samples, 2), "x, time to reward ", s.target, " ",
             Fixed(main.speedup_time_to_target, 2), "x, learner utilization ",
             Fixed(main.async.utilization, 3), " vs ", Fixed(main.colocated.utilization, 3));
  if (!per_median.empty()) {
    report.summary += StrCat("; samples/s speedup by median: ", Join(per_median, ", "));
  }
  if (overhead.has_value()) {
    report.summary += StrCat("; observability (trace, metrics, dashboard) costs ",
                             Fixed(100 * *overhead, 1), " % of async samples/s (goal <= 2 %)");
  }
  return report;
}

}  // namespace flywheel::bench
