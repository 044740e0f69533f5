// What the elastic job's controller feeds the water-level rule, apart from the job's threads so
// that the cluster simulator (sim/) runs the same code on a virtual clock:
//
//   ElasticAdmission   version-bounded admission: once k learner steps are done and their
//                      weights published, the episodes of batches 0 … k + η may have been
//                      started (η = learner.max_staleness), so no admitted episode can be more
//                      than η versions behind when its step trains on it;
//   ElasticRule        the WaterLevelOptions the job runs with, from its [scheduler] section;
//   ElasticObservation one controller tick's observation: all episodes handed out and finished
//                      so far, and "a new batch is demanded" while admission has room.
//   GrantAdmission     the same admission when the cells are other processes: each rolling-out
//                      cell is granted a cumulative count of episodes it may have started
//                      (scheduler_service.proto, admit_until).
//
// Pure functions and a value type; no threads, no clock.
#ifndef FLYWHEEL_SCHEDULER_ELASTIC_CONTROL_H_
#define FLYWHEEL_SCHEDULER_ELASTIC_CONTROL_H_

#include <cstdint>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "flywheel/scheduler/remaining_tokens.h"
#include "flywheel/scheduler/scheduler_options.h"
#include "flywheel/scheduler/water_level.h"

namespace flywheel::scheduler {

struct ElasticAdmission {
  int64_t max_staleness = 0;  // η >= 0 (learner.max_staleness)
  int64_t batch_groups = 1;   // groups per learner step (run.batch_groups)
  int64_t group_size = 1;     // episodes per group (actor.group_size)

  absl::Status Validate() const;
  std::string DebugString() const;

  // Episodes that may still be handed out when `steps_done` steps are trained and published and
  // `handed_out` episodes were handed out in all: (k + 1 + η) · batch_groups · group_size −
  // handed_out. Zero or negative: start nothing.
  int64_t Room(int64_t steps_done, int64_t handed_out) const {
    const int64_t batches = steps_done + 1 + max_staleness;
    return batches * batch_groups * group_size - handed_out;
  }
};

// The admission of the async job (run.max_pipeline_batches = K > 0): an episode starts only
// while the pipeline, the episodes being played plus the finished ones the learner has not
// taken yet, holds fewer than ⌈K · batch_groups⌉ groups of episodes. It counts batches the
// learner has taken, where ElasticAdmission counts steps trained and published.
struct PipelineAdmission {
  int64_t groups = 0;  // ⌈K · batch_groups⌉; 0: no admission
  int64_t group_size = 1;

  static PipelineAdmission For(double max_pipeline_batches, int64_t batch_groups,
                               int64_t group_size) {
    return {.groups = static_cast<int64_t>(std::ceil(max_pipeline_batches * batch_groups)),
            .group_size = group_size};
  }
  bool enabled() const { return groups > 0; }
  // Episodes that may still start while `occupancy` episodes are in the pipeline.
  int64_t Room(int64_t occupancy) const { return groups * group_size - occupancy; }
};

// The rule of an elastic job with `satellites` satellite cells, each holding
// `episodes_per_cell` concurrent episodes (actor.episodes_in_flight). w counts episodes, or
// with scheduler.unit = "tokens" the tokens still to generate: the capacity is then
// episodes_per_cell x `episode_tokens` (a fresh episode's expected tokens) until each
// observation carries the current estimate (AddTokenWork).
WaterLevelOptions ElasticRule(const SchedulerOptions& options, int satellites,
                              double episodes_per_cell, double episode_tokens = 1);

// The token unit's inputs of one observation: w = the tokens the episodes in flight (policy
// tokens generated so far, `in_flight`) are expected to generate still, and a full cell's
// capacity = episodes_per_cell fresh episodes.
void AddTokenWork(const RemainingTokens& estimate, std::span<const int64_t> in_flight,
                  double episodes_per_cell, SchedulerObservation& observation);

// One tick's observation. `finished` is clamped to `handed_out` (an episode is counted finished
// by its actor a moment before the handout counter of a concurrent start may be read).
SchedulerObservation ElasticObservation(absl::Time now, int64_t handed_out, int64_t finished,
                                        int64_t admission_room, int64_t step);

// A cell of another process, as its heartbeats report it, for GrantAdmission.
struct CellAdmission {
  bool alive = true;
  // Wanted in rollout by the scheduler AND reporting itself in rollout; any other cell is
  // granted nothing more.
  bool rolling_out = false;
  int64_t dispatched = 0;   // episodes it has started (reported)
  int64_t finished = 0;     // of those, inserted or failed (reported)
  int64_t admit_until = 0;  // its current grant (cumulative)

  // Episodes it holds for admission: granted (used or not) or started, whichever is more.
  int64_t held() const { return std::max(admit_until, dispatched); }
};

// The episodes all cells have taken from admission: what every live cell holds, and what the
// dead ones finished. A dead cell's unfinished episodes are lost with it and given back, so
// that the batches they were admitted for are filled by other cells.
int64_t AdmittedEpisodes(std::span<const CellAdmission> cells);

// The next grants (admit_until per cell, same order). Room = admission.Room(steps_done,
// AdmittedEpisodes(cells)) is shared among the rolling-out cells in order, in whole groups,
// each cell up to `episodes_per_cell` episodes granted but not finished. A cell not rolling out
// keeps what it started and loses the rest of its grant; a dead cell's grant is unchanged.
// Grants never go below what a cell has started.
std::vector<int64_t> GrantAdmission(const ElasticAdmission& admission, int64_t steps_done,
                                    std::span<const CellAdmission> cells,
                                    int64_t episodes_per_cell);

}  // namespace flywheel::scheduler

#endif  // FLYWHEEL_SCHEDULER_ELASTIC_CONTROL_H_
