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
//
// Pure functions and a value type; no threads, no clock.
#ifndef FLYWHEEL_SCHEDULER_ELASTIC_CONTROL_H_
#define FLYWHEEL_SCHEDULER_ELASTIC_CONTROL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
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

// The rule of an elastic job with `satellites` satellite cells, each holding
// `episodes_per_cell` concurrent episodes (actor.episodes_in_flight): w counts episodes.
WaterLevelOptions ElasticRule(const SchedulerOptions& options, int satellites,
                              double episodes_per_cell);

// One tick's observation. `finished` is clamped to `handed_out` (an episode is counted finished
// by its actor a moment before the handout counter of a concurrent start may be read).
SchedulerObservation ElasticObservation(absl::Time now, int64_t handed_out, int64_t finished,
                                        int64_t admission_room, int64_t step);

}  // namespace flywheel::scheduler

#endif  // FLYWHEEL_SCHEDULER_ELASTIC_CONTROL_H_
