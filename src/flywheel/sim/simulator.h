// A discrete-event simulator of a training run on a cluster: the hardware is the cost model
// (cost_model.h), the decisions are the project's own policy objects, called as the jobs call
// them, on a virtual clock (core/clock.h):
//
//   episode ─ generation ─▶ env wait ─▶ generation ─ … ─▶ finished ─▶ GroupAssembler (buffer/)
//      ▲ started while ElasticAdmission::Room > 0 (scheduler/elastic_control.h)        │ group
//      │                                                                               ▼
//   rollout cells ◀── weights (transfer) ◀── step end ◀── micro-steps ◀── RateLimiter (buffer/)
//      ▲                                                  claimed by      StalenessFilter::Apply
//      └── WaterLevelPolicy::Decide every tick (elastic) ─ training cells  (learner/)
//
// Modes: colocated (every cell generates a batch, then every cell trains on it), async (a
// static split: K rollout devices, the rest train), elastic (core cells train, satellites move
// under the water-level rule). Events sit in a std::priority_queue ordered by (time, sequence
// number), so a run is a pure function of its config and seed.
//
// Thread-compatible: one Simulate call runs on the calling thread and shares nothing.
#ifndef FLYWHEEL_SIM_SIMULATOR_H_
#define FLYWHEEL_SIM_SIMULATOR_H_

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/scheduler/water_level.h"
#include "flywheel/sim/sim_config.h"

namespace flywheel::sim {

struct SimulateOptions {
  // Lines of the timeline kept at most (role changes and steps); the rest are counted.
  int64_t max_timeline_lines = 100'000;
};

struct SimResult {
  nlohmann::json summary;                // summary.json of a real run, plus the simulator's own
  std::vector<nlohmann::json> metrics;   // metrics.jsonl: one line per learner step
  std::vector<nlohmann::json> timeline;  // timeline.jsonl: role changes and steps
  // The controller's decisions (elastic): the changed ones, or all of them with
  // scheduler.log_every_decision. Their `observation` fields are what was observed.
  std::vector<scheduler::SchedulerDecision> decisions;
  int64_t events = 0;       // events processed
  double sim_seconds = 0;   // simulated time at the end
  double real_seconds = 0;  // wall time the simulation took
};

absl::StatusOr<SimResult> Simulate(const SimConfig& config, const SimulateOptions& options = {});

// Writes a run directory like `flywheel train`'s at `dir` (which must not exist): config.toml,
// metrics.jsonl, summary.json, scheduler.jsonl (elastic) and timeline.jsonl.
absl::Status WriteSimRun(const SimConfig& config, const SimResult& result,
                         const std::filesystem::path& dir);

}  // namespace flywheel::sim

#endif  // FLYWHEEL_SIM_SIMULATOR_H_
