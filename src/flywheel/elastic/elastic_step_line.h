// What the elastic job's core writes for each streaming learner step (metrics.jsonl), the same
// whether its satellites are threads (`flywheel train`) or processes (`flywheel learner
// --scheduler-listen`).
#ifndef FLYWHEEL_ELASTIC_ELASTIC_STEP_LINE_H_
#define FLYWHEEL_ELASTIC_ELASTIC_STEP_LINE_H_

#include <cstdint>
#include <nlohmann/json.hpp>

#include "flywheel/core/trajectory.h"
#include "flywheel/elastic/training_meter.h"
#include "flywheel/learner/streaming_learner.h"
#include "flywheel/scheduler/micro_step_queue.h"

namespace flywheel {

// What the feeder saw of one step's trajectories.
struct StepData {
  int64_t trajectories = 0;
  double reward_sum = 0;
  int64_t successes = 0;

  void Add(const Trajectory& t, double success_reward);
  double reward() const { return trajectories ? reward_sum / trajectories : 0.0; }
  double success() const {
    return trajectories ? static_cast<double>(successes) / trajectories : 0.0;
  }
};

// The step's metrics line: the result `r` of the core's FinishStep, the learner's version
// after it, seconds since the run started and since the step began, the feeder's view of the
// step, and the step queue's report: what it dropped (stale, too long) and the lags it saw.
nlohmann::json ElasticStepLine(const StreamingStepResult& r, int64_t version, double elapsed_s,
                               double step_seconds, const StepData& data, const StepReport& report);

// The training meter's view of a completed step (the core cell's result, the queue's report).
MeteredStep MeteredStepOf(const StreamingStepResult& r, const StepReport& report);

}  // namespace flywheel

#endif  // FLYWHEEL_ELASTIC_ELASTIC_STEP_LINE_H_
