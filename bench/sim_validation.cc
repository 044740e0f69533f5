#include "bench/sim_validation.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include "absl/strings/str_format.h"
#include "bench/bench.h"
#include "bench/cells.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/learner/staleness.h"
#include "flywheel/runtime/embedded_job.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/sim/calibration.h"
#include "flywheel/sim/job_costs.h"
#include "flywheel/sim/simulator.h"

namespace flywheel::bench {
namespace {

namespace fs = std::filesystem;

constexpr double kGoal = 0.15;  // prediction_error goal of every figure

struct Mode {
  std::string name;
  TrainMode mode;
};

const Mode kModes[] = {{"colocated", TrainMode::kColocated},
                       {"async", TrainMode::kAsync},
                       {"elastic", TrainMode::kElastic}};

int64_t IntOr0(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<int64_t>() : 0;
}

absl::StatusOr<RunFigures> ReadFigures(const std::vector<nlohmann::json>& lines,
                                       const std::string& what) {
  RunFigures f;
  for (const nlohmann::json& line : lines) {
    if (!line.contains("elapsed_s") || !line.contains("learner_busy_s") ||
        !line.contains("trajectories") || !line.contains("lag_counts")) {
      return absl::InternalError(StrCat(what,
                                        ": a metrics line without elapsed_s, "
                                        "learner_busy_s, trajectories or lag_counts: ",
                                        line.dump()));
    }
    ++f.steps;
    f.seconds = line["elapsed_s"].get<double>();
    f.busy_s += line["learner_busy_s"].get<double>();
    int64_t dropped = 0;
    if (line.contains("dropped")) {
      dropped =
          IntOr0(line["dropped"], "learner_stale") + IntOr0(line["dropped"], "learner_too_long");
    }
    f.trained += line["trajectories"].get<int64_t>() - dropped;
    for (const auto& [lag, count] : line["lag_counts"].items()) {
      f.lags[std::stoll(lag)] += count.get<int64_t>();
    }
  }
  if (f.steps == 0) return absl::InternalError(StrCat(what, ": no learner step"));
  return f;
}

absl::StatusOr<std::vector<nlohmann::json>> ReadLines(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot read ", path.string()));
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return absl::InternalError(StrCat(path.string(), ": not JSON: ", line));
    lines.push_back(std::move(j));
  }
  return lines;
}

// ½ Σ |p(l) − q(l)| over the lags either side saw.
double TotalVariation(const std::map<int64_t, int64_t>& a, const std::map<int64_t, int64_t>& b) {
  double na = 0, nb = 0;
  for (const auto& [lag, n] : a) na += static_cast<double>(n);
  for (const auto& [lag, n] : b) nb += static_cast<double>(n);
  if (na == 0 || nb == 0) return 1;
  std::map<int64_t, std::pair<double, double>> both;
  for (const auto& [lag, n] : a) both[lag].first = static_cast<double>(n) / na;
  for (const auto& [lag, n] : b) both[lag].second = static_cast<double>(n) / nb;
  double d = 0;
  for (const auto& [lag, p] : both) d += std::abs(p.first - p.second);
  return d / 2;
}

double RelativeError(double simulated, double real) {
  return real > 0 ? std::abs(simulated / real - 1) : (simulated == 0 ? 0 : 1);
}

absl::StatusOr<JobConfig> ModeConfig(const ValidationSettings& s, const ValidationCase& c,
                                     const Mode& mode) {
  ASSIGN_OR_RETURN(JobConfig job, LoadJobConfig(c.config_file, c.overrides));
  job.run.name = StrCat(c.name, "-", mode.name);
  job.run.runs_dir = s.runs_dir.string();
  job.run.max_steps = s.steps;
  job.run.max_wall_seconds = 600;  // a bound on a run that stalls, far above a normal one
  job.run.eval_episodes = 0;
  PlaceOnCells(job, mode.mode, c.cells, c.cells / 2, s.max_staleness);
  if (mode.mode == TrainMode::kElastic) {
    job.scheduler.core_cells = 1;
    job.scheduler.min_residence_seconds = 0.05;  // as `flywheel bench elastic`
  }
  RETURN_IF_ERROR(Annotate(job.Validate(), StrCat("validation case ", c.name)));
  return job;
}

}  // namespace

nlohmann::json RunFigures::ToJson() const {
  return {{"steps", steps},
          {"seconds", seconds},
          {"learner_utilization", utilisation()},
          {"trained_samples_per_s", samples_per_s()},
          {"lag_mean", lag_mean()},
          {"lag_counts", LagCountsJson(lags)}};
}

double RunFigures::lag_mean() const { return SummariseLags(lags).mean; }

absl::StatusOr<RunFigures> SimulateJob(const JobConfig& job, const sim::MeasuredCosts& costs,
                                       int64_t max_steps, double max_seconds) {
  ASSIGN_OR_RETURN(sim::SimConfig config, sim::SimConfigForJob(job, costs));
  config.run.max_steps = max_steps;
  config.run.max_sim_hours = max_seconds / 3600;
  config.run.timeline = false;
  ASSIGN_OR_RETURN(const sim::SimResult simulated, sim::Simulate(config));
  return ReadFigures(simulated.metrics, StrCat(job.run.name, " (simulated)"));
}

std::vector<ValidationCase> DefaultValidationCases(const std::string& source_dir) {
  return {
      {"copy", source_dir + "/examples/copy.toml", {}, 2},
      {"guess", source_dir + "/examples/guess.toml", {}, 2},
      {"copy-4-cells", source_dir + "/examples/copy.toml", {"run.emulated_slowdown=2"}, 4},
  };
}

namespace {

// One round of one case in one mode: calibrate, run for real, simulate.
struct Round {
  nlohmann::json json;
  double real[3] = {0, 0, 0};       // utilisation, samples/s, mean lag
  double simulated[3] = {0, 0, 0};  // the same
  double error[3] = {0, 0, 0};      // the prediction errors (the third: TV distance)
};

absl::StatusOr<Round> RunRound(const ValidationSettings& s, const ValidationCase& c,
                               const Mode& mode) {
  ASSIGN_OR_RETURN(const JobConfig job, ModeConfig(s, c, mode));
  // Each mode's job calibrated as it runs: its cells' thread settings differ (one intra-op
  // thread per rank when ranks share the process).
  sim::CalibrationOptions options;
  options.episodes = s.calibration_episodes;
  options.work_dir = s.runs_dir;
  ASSIGN_OR_RETURN(const sim::Calibration calibration, sim::CalibrateJob(job, options));
  std::error_code ignored;
  fs::remove_all(fs::path(job.run.runs_dir) / job.run.name, ignored);  // the previous round's
  EmbeddedJobOptions job_options;
  job_options.progress = nullptr;
  ASSIGN_OR_RETURN(const EmbeddedJobResult ran, RunEmbeddedJob(job, job_options));
  ASSIGN_OR_RETURN(const std::vector<nlohmann::json> real_lines,
                   ReadLines(fs::path(job.run.runs_dir) / job.run.name / "metrics.jsonl"));
  const std::string what = StrCat(c.name, " ", mode.name);
  ASSIGN_OR_RETURN(const RunFigures real, ReadFigures(real_lines, StrCat(what, " (real)")));
  // A real run stopped early is compared as far.
  ASSIGN_OR_RETURN(const RunFigures predicted, SimulateJob(job, calibration.costs, real.steps, 0));
  Round r;
  r.real[0] = real.utilisation();
  r.real[1] = real.samples_per_s();
  r.real[2] = real.lag_mean();
  r.simulated[0] = predicted.utilisation();
  r.simulated[1] = predicted.samples_per_s();
  r.simulated[2] = predicted.lag_mean();
  r.error[0] = RelativeError(r.simulated[0], r.real[0]);
  r.error[1] = RelativeError(r.simulated[1], r.real[1]);
  r.error[2] = TotalVariation(predicted.lags, real.lags);
  r.json = {{"calibration", calibration.report},
            {"real", real.ToJson()},
            {"simulated", predicted.ToJson()},
            {"real_summary_stopped_by", ran.summary.value("stopped_by", "")},
            {"prediction_error",
             {{"learner_utilization", r.error[0]},
              {"trained_samples_per_s", r.error[1]},
              {"staleness_total_variation", r.error[2]}}}};
  return r;
}

}  // namespace

absl::StatusOr<ValidationResult> ValidateSimulator(const ValidationSettings& s) {
  if (s.rounds < 1) return absl::InvalidArgumentError("simulator validation: rounds must be >= 1");
  static const char* const kFigures[] = {"learner utilisation", "trained samples/s",
                                         "staleness (TV distance; mean lags)"};
  static const char* const kKeys[] = {"learner_utilization", "trained_samples_per_s",
                                      "staleness_total_variation"};
  ValidationResult out;
  out.cases = nlohmann::json::object();
  for (const ValidationCase& c : s.cases) {
    nlohmann::json case_json = {
        {"config", c.config_file}, {"overrides", c.overrides}, {"cells", c.cells}};
    std::vector<std::vector<Round>> rounds(std::size(kModes));
    // Round-major, so that a slow spell of the machine falls on every mode alike.
    for (int64_t round = 0; round < s.rounds; ++round) {
      for (size_t m = 0; m < std::size(kModes); ++m) {
        ASSIGN_OR_RETURN(Round r, RunRound(s, c, kModes[m]));
        rounds[m].push_back(std::move(r));
      }
    }
    for (size_t m = 0; m < std::size(kModes); ++m) {
      nlohmann::json mode_json = {{"rounds", nlohmann::json::array()}};
      nlohmann::json errors = nlohmann::json::object();
      for (const Round& r : rounds[m]) mode_json["rounds"].push_back(r.json);
      for (int f = 0; f < 3; ++f) {
        std::vector<double> real, simulated, error;
        for (const Round& r : rounds[m]) {
          real.push_back(r.real[f]);
          simulated.push_back(r.simulated[f]);
          error.push_back(r.error[f]);
        }
        const double e = Percentile(error, 0.5);
        errors[kKeys[f]] = e;
        out.table.push_back(
            {c.name, kModes[m].name, kFigures[f], absl::StrFormat("%.3g", Percentile(real, 0.5)),
             absl::StrFormat("%.3g", Percentile(simulated, 0.5)), absl::StrFormat("%.3f", e),
             absl::StrFormat("%.3f", *std::max_element(error.begin(), error.end()))});
        out.worst_error = std::max(out.worst_error, e);
        ++out.figures;
        out.within_goal += e <= kGoal;
      }
      mode_json["prediction_error"] = errors;  // medians over the rounds
      case_json[kModes[m].name] = std::move(mode_json);
    }
    out.cases[c.name] = std::move(case_json);
  }
  return out;
}

}  // namespace flywheel::bench
