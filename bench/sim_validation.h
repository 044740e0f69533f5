// The simulator against real runs (`flywheel bench sim`, issue: validation): for each job
// configuration, `flywheel sim calibrate`'s measurements (sim/calibration.h) and then, for each
// mode (colocated, async, elastic), a real `flywheel train` run and the simulation of the same
// job on the calibrated costs. Compared, each over the run's learner steps:
//
//   learner utilisation   Σ learner_busy_s / time of the last step (the core cell; colocated:
//                         rank 0), the same definition on both sides
//   trained samples/s     Σ (trajectories − dropped by the learner) / time of the last step
//   staleness             the lag distribution of the trajectories the steps saw (lag_counts):
//                         total-variation distance ½ Σ_l |p_real(l) − p_sim(l)|, and the means
//
// prediction_error = |simulated / real − 1| for the first two, the distance for the third. Real
// runs of the same job differ by 5–10 % from one to the next, so each case and mode is run
// `rounds` times (calibration, real run, simulation) and the figures are medians over them.
// SimulateJob is also how `flywheel bench elastic` predicts the order of its sides.
#ifndef FLYWHEEL_BENCH_SIM_VALIDATION_H_
#define FLYWHEEL_BENCH_SIM_VALIDATION_H_

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/sim/job_costs.h"

namespace flywheel::bench {

struct ValidationCase {
  std::string name;
  std::string config_file;             // a flywheel train config
  std::vector<std::string> overrides;  // --set assignments on top of it
  int64_t cells = 2;                   // colocated: C actors and C ranks; async: C/2 and C/2
};

struct ValidationSettings {
  std::vector<ValidationCase> cases;
  int64_t steps = 30;         // learner steps of every real run
  int64_t max_staleness = 1;  // η of every run (async admission: η + 1 batches)
  int64_t calibration_episodes = 256;
  int64_t rounds = 1;
  std::filesystem::path runs_dir;  // scratch; removed by the caller
};

struct ValidationResult {
  nlohmann::json cases;  // per case: calibration, and per mode the real and simulated figures
  // Rows: case, mode, figure, real, sim, error (medians over the rounds), largest error.
  std::vector<std::vector<std::string>> table;
  double worst_error = 0;  // the largest median error over every figure of every case and mode
  int64_t figures = 0;
  int64_t within_goal = 0;  // figures with prediction_error <= 0.15
};

// What a run's metrics lines say, summed over its steps; the same reading for a real run and
// a simulated one.
struct RunFigures {
  int64_t steps = 0;
  double seconds = 0;  // elapsed at the last step
  double busy_s = 0;
  int64_t trained = 0;  // trajectories minus the learner's staleness and length drops
  std::map<int64_t, int64_t> lags;

  double utilisation() const { return seconds > 0 ? busy_s / seconds : 0; }
  double samples_per_s() const { return seconds > 0 ? trained / seconds : 0; }
  double lag_mean() const;
  nlohmann::json ToJson() const;
};

// The simulation of `job` on `costs` (its calibration) up to `max_steps` learner steps or, with
// `max_seconds` > 0, that much simulated time, read as a real run's metrics are.
absl::StatusOr<RunFigures> SimulateJob(const JobConfig& job, const sim::MeasuredCosts& costs,
                                       int64_t max_steps, double max_seconds);

// The default three: the copy task (one turn, heavy-tailed lengths) on 2 cells, the guess task
// (up to six one-token turns) on 2 cells, and the copy task on 4 cells each half a core
// (run.emulated_slowdown = 2).
std::vector<ValidationCase> DefaultValidationCases(const std::string& source_dir);

absl::StatusOr<ValidationResult> ValidateSimulator(const ValidationSettings& settings);

}  // namespace flywheel::bench

#endif  // FLYWHEEL_BENCH_SIM_VALIDATION_H_
