#include "flywheel/scheduler/water_level.h"

#include <cmath>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "flywheel/core/strings.h"

namespace flywheel::scheduler {

using Move = SchedulerDecision::Move;
using Cause = SchedulerDecision::Cause;

absl::Status WaterLevelOptions::Validate() const {
  if (satellites < 1) {
    return absl::InvalidArgumentError(
        StrCat("scheduler.satellites must be >= 1 (got ", satellites,
               "): with no satellite cells there is nothing to schedule; leave the scheduler off"));
  }
  if (!(std::isfinite(capacity_per_cell) && capacity_per_cell > 0)) {
    return absl::InvalidArgumentError(
        StrCat("scheduler.capacity_per_cell must be a finite number > 0 (got ", capacity_per_cell,
               " ", WorkUnitName(unit), " per cell)"));
  }
  if (!(hysteresis >= 0 && hysteresis < 1)) {
    return absl::InvalidArgumentError(
        StrCat("scheduler.hysteresis must be in [0, 1) (got ", hysteresis,
               "): it is the fraction of the remaining capacity the work must stay below"));
  }
  if (min_residence < absl::ZeroDuration() || min_residence == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        StrCat("scheduler.min_residence must be finite and >= 0 (got ",
               absl::FormatDuration(min_residence), ")"));
  }
  if (min_rollout_cells < 1 || min_rollout_cells > satellites) {
    return absl::InvalidArgumentError(
        StrCat("scheduler.min_rollout_cells must be in [1, scheduler.satellites = ", satellites,
               "] (got ", min_rollout_cells,
               "): only satellites generate, so a batch with work left needs one rolling out"));
  }
  return absl::OkStatus();
}

std::string WaterLevelOptions::DebugString() const {
  return StrCat("WaterLevelOptions(satellites=", satellites,
                ", capacity_per_cell=", capacity_per_cell, " ", WorkUnitName(unit),
                ", hysteresis=", hysteresis,
                ", min_residence=", absl::FormatDuration(min_residence),
                ", min_rollout_cells=", min_rollout_cells, ")");
}

absl::StatusOr<WaterLevelPolicy> WaterLevelPolicy::Create(WaterLevelOptions options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return WaterLevelPolicy(std::move(options));
}

WaterLevelPolicy::WaterLevelPolicy(WaterLevelOptions options)
    : options_(std::move(options)),
      rollout_cells_(options_.satellites),
      last_switch_(options_.satellites, absl::InfinitePast()) {}

CellRole WaterLevelPolicy::role(int satellite) const {
  ABSL_RAW_CHECK(satellite >= 0 && satellite < options_.satellites, "satellite out of range");
  return satellite < rollout_cells_ ? CellRole::kRollout : CellRole::kTrain;
}

absl::Time WaterLevelPolicy::last_switch(int satellite) const {
  ABSL_RAW_CHECK(satellite >= 0 && satellite < options_.satellites, "satellite out of range");
  return last_switch_[satellite];
}

std::string WaterLevelPolicy::DebugString() const {
  return StrCat("WaterLevelPolicy(rollout=", rollout_cells_, "/", options_.satellites,
                " satellites, ", options_.DebugString(), ")");
}

absl::Status WaterLevelPolicy::CheckObservation(const SchedulerObservation& o) const {
  if (o.dispatched < 0 || o.finished < 0 || o.finished > o.dispatched) {
    return absl::InvalidArgumentError(StrCat("scheduler observation at step ", o.step,
                                             ": need 0 <= finished <= dispatched (got "
                                             "dispatched=",
                                             o.dispatched, ", finished=", o.finished, ")"));
  }
  if (!(std::isfinite(o.capacity_per_cell) && o.capacity_per_cell >= 0)) {
    return absl::InvalidArgumentError(StrCat("scheduler observation at step ", o.step,
                                             ": capacity_per_cell must be finite and >= 0 (got ",
                                             o.capacity_per_cell, ")"));
  }
  if (!(std::isfinite(o.remaining_tokens) && o.remaining_tokens >= 0)) {
    return absl::InvalidArgumentError(StrCat("scheduler observation at step ", o.step,
                                             ": remaining_tokens must be finite and >= 0 (got ",
                                             o.remaining_tokens, ")"));
  }
  if (o.now < last_now_) {
    return absl::InvalidArgumentError(
        StrCat("scheduler observation at step ", o.step, ": time went backwards by ",
               absl::FormatDuration(last_now_ - o.now), " since the previous decision"));
  }
  return absl::OkStatus();
}

double WaterLevelPolicy::Capacity(const SchedulerObservation& o) const {
  return o.capacity_per_cell > 0 ? o.capacity_per_cell : options_.capacity_per_cell;
}

double WaterLevelPolicy::Work(const SchedulerObservation& o) const {
  return options_.unit == WorkUnit::kTokens ? o.remaining_tokens
                                            : static_cast<double>(o.in_flight());
}

bool WaterLevelPolicy::Resident(int satellite, absl::Time now, SchedulerDecision& d) const {
  const absl::Duration held = now - last_switch_[satellite];
  if (held >= options_.min_residence) return true;
  d.move = Move::kNone;
  d.cause = Cause::kResidence;
  d.satellite = satellite;
  d.reason =
      StrCat(d.reason, " but satellite ", satellite, " switched ", absl::FormatDuration(held),
             " ago < min_residence ", absl::FormatDuration(options_.min_residence), ": no move");
  return false;
}

void WaterLevelPolicy::DecideReturn(SchedulerDecision& d) const {
  const int r = rollout_cells_;
  if (r == options_.satellites) {
    d.cause = Cause::kAllRollingOut;
    d.reason = StrCat("new batch demanded and all ", r, " satellites roll out: no move");
    return;
  }
  // The last to leave comes back first: with trainers a suffix, that is satellite r.
  d.reason = "new batch demanded";
  if (!Resident(r, d.observation.now, d)) return;
  d.move = Move::kToRollout;
  d.cause = Cause::kNewBatch;
  d.satellite = r;
  d.reason = StrCat("new batch demanded: satellite ", r, " (last to leave) back to rollout, ", r,
                    " -> ", r + 1, " rollout cells");
}

void WaterLevelPolicy::DecideRelease(SchedulerDecision& d) const {
  const int r = rollout_cells_;
  const std::string w = StrCat("w=", d.work, " ", WorkUnitName(options_.unit));
  if (d.work > 0 && r < options_.min_rollout_cells) {
    // Work appeared without a demand while too few cells generate: restore the floor.
    d.reason =
        StrCat(w, " with ", r, " rollout cells < min_rollout_cells ", options_.min_rollout_cells);
    if (!Resident(r, d.observation.now, d)) return;
    d.move = Move::kToRollout;
    d.cause = Cause::kMinRolloutCells;
    d.satellite = r;
    d.reason = StrCat(d.reason, ": satellite ", r, " (last to leave) back to rollout");
    return;
  }
  if (r == 0) {
    d.cause = Cause::kAllTraining;
    d.reason = StrCat(w, " and all ", options_.satellites, " satellites train: no move");
    return;
  }
  if (d.work > 0 && r == options_.min_rollout_cells) {
    d.cause = Cause::kMinRolloutCells;
    d.reason =
        StrCat(w, " still to generate and ", r, " rollout cells = min_rollout_cells: no move");
    return;
  }
  const std::string rule = StrCat(d.threshold, " = ", r - 1, " x ", Capacity(d.observation),
                                  " x (1 - ", options_.hysteresis, ")");
  if (d.work > d.threshold) {
    d.cause = Cause::kAboveThreshold;
    d.reason = StrCat(w, " does not fit ", r - 1, " of ", r, " rollout cells: ", d.work, " > ",
                      rule, ": no move");
    return;
  }
  // The highest index still rolling out leaves first.
  const int leaving = r - 1;
  d.reason = StrCat(w, " fits ", r - 1, " of ", r, " rollout cells: ", d.work, " <= ", rule);
  if (!Resident(leaving, d.observation.now, d)) return;
  d.move = Move::kToTrain;
  d.cause = Cause::kFits;
  d.satellite = leaving;
  d.reason = StrCat(d.reason, ": satellite ", leaving, " to train");
}

absl::StatusOr<SchedulerDecision> WaterLevelPolicy::Decide(const SchedulerObservation& o) {
  if (absl::Status s = CheckObservation(o); !s.ok()) return s;
  SchedulerDecision d;
  d.observation = o;
  d.unit = options_.unit;
  d.work = Work(o);
  d.rollout_cells_before = rollout_cells_;
  d.threshold = rollout_cells_ > 0
                    ? (rollout_cells_ - 1) * Capacity(o) * (1 - options_.hysteresis)
                    : 0;
  if (o.new_batch_demanded) {
    DecideReturn(d);
  } else {
    DecideRelease(d);
  }

  if (d.move == Move::kToTrain) {
    --rollout_cells_;
    last_switch_[d.satellite] = o.now;
  } else if (d.move == Move::kToRollout) {
    ++rollout_cells_;
    last_switch_[d.satellite] = o.now;
  }
  d.rollout_cells_after = rollout_cells_;
  d.changed = d.move != Move::kNone || !has_last_cause_ || d.cause != last_cause_;
  has_last_cause_ = true;
  last_cause_ = d.cause;
  last_now_ = o.now;
  return d;
}

}  // namespace flywheel::scheduler
