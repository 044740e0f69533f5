#include "flywheel/scheduler/elastic_control.h"

#include <algorithm>

#include "flywheel/core/strings.h"

namespace flywheel::scheduler {

absl::Status ElasticAdmission::Validate() const {
  if (max_staleness < 0) {
    return absl::InvalidArgumentError(
        StrCat("elastic admission needs learner.max_staleness >= 0 (got ", max_staleness,
               "): it admits the episodes of batches up to max_staleness versions ahead"));
  }
  if (batch_groups < 1 || group_size < 1) {
    return absl::InvalidArgumentError(
        StrCat("elastic admission needs run.batch_groups >= 1 and "
               "actor.group_size >= 1 (got ",
               batch_groups, " and ", group_size, ")"));
  }
  return absl::OkStatus();
}

std::string ElasticAdmission::DebugString() const {
  return StrCat("ElasticAdmission(max_staleness=", max_staleness, ", batch_groups=", batch_groups,
                ", group_size=", group_size, ")");
}

WaterLevelOptions ElasticRule(const SchedulerOptions& options, int satellites,
                              double episodes_per_cell) {
  WaterLevelOptions rule;
  rule.satellites = satellites;
  rule.capacity_per_cell = episodes_per_cell;
  rule.unit = WorkUnit::kEpisodes;
  rule.hysteresis = options.hysteresis;
  rule.min_residence = absl::Seconds(options.min_residence_seconds);
  return rule;
}

SchedulerObservation ElasticObservation(absl::Time now, int64_t handed_out, int64_t finished,
                                        int64_t admission_room, int64_t step) {
  SchedulerObservation observation;
  observation.now = now;
  observation.dispatched = handed_out;
  observation.finished = std::min(handed_out, finished);
  observation.new_batch_demanded = admission_room > 0;
  observation.step = step;
  return observation;
}

}  // namespace flywheel::scheduler
