// `flywheel sim calibrate JOB.toml`: short real measurements of a `flywheel train` job on this
// machine, turned into the simulator config that describes the job (sim/job_costs.h).
//
//   episodes   actor.episodes_in_flight-wide Actor::Run of the job's environment (without its
//              latency, which the simulator draws from the same models) with the job's initial
//              policy: the shape of each episode (turns, prompt, generated and observation
//              tokens) becomes the simulator's trace
//   decode     the job's rollout engine stepping b sequences at once, for b from 1 to
//              actor.episodes_in_flight: a least-squares line o_d + s·b through the median
//              step time of each b
//   swap       a newer weight snapshot published to the engine: the extra time of the step
//              that takes it
//   learner    the job's LearnerSession on batches of the recorded episodes (a whole batch and
//              half of one): a line o_s + t·T through the step times against the batch's tokens
//
// With run.emulated_slowdown = f every measured compute time is f times what it took, as the
// job's cells count it (core/emulated_device.h). The measurements take a few seconds to a minute
// depending on the job; they load this machine's cores as the job would.
#ifndef FLYWHEEL_SIM_CALIBRATION_H_
#define FLYWHEEL_SIM_CALIBRATION_H_

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/sim/job_costs.h"
#include "flywheel/sim/sim_config.h"

namespace flywheel::sim {

struct CalibrationOptions {
  int64_t episodes = 256;          // episodes recorded for the trace (and the learner's batches)
  int64_t decode_steps = 24;       // timed decode steps per batch size
  int64_t learner_steps = 3;       // timed learner steps per batch size (after one warm-up)
  std::filesystem::path work_dir;  // the learner's scratch run directory; empty = a temp dir
};

struct Calibration {
  MeasuredCosts costs;
  SimConfig sim;          // SimConfigForJob(job, costs)
  nlohmann::json report;  // the raw points and the fits, for the user and the bench
};

absl::StatusOr<Calibration> CalibrateJob(const JobConfig& job,
                                         const CalibrationOptions& options = {});

}  // namespace flywheel::sim

#endif  // FLYWHEEL_SIM_CALIBRATION_H_
