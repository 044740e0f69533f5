#include "flywheel/scheduler/role_controller.h"

#include <ostream>

#include "flywheel/core/strings.h"

namespace flywheel::scheduler {

using Move = SchedulerDecision::Move;
using Cause = SchedulerDecision::Cause;

std::string_view WorkUnitName(WorkUnit unit) {
  return unit == WorkUnit::kTokens ? "tokens" : "episodes";
}

absl::StatusOr<WorkUnit> ParseWorkUnit(std::string_view name) {
  if (name == "episodes") return WorkUnit::kEpisodes;
  if (name == "tokens") return WorkUnit::kTokens;
  return absl::InvalidArgumentError(
      StrCat("scheduler.unit: '", name, "' is not a work unit; use \"episodes\" or \"tokens\""));
}

std::string_view CellRoleName(CellRole role) {
  return role == CellRole::kTrain ? "train" : "rollout";
}

std::string_view MoveName(Move move) {
  switch (move) {
    case Move::kNone:
      return "none";
    case Move::kToTrain:
      return "to_train";
    case Move::kToRollout:
      return "to_rollout";
  }
  return "unknown";
}

std::string_view CauseName(Cause cause) {
  switch (cause) {
    case Cause::kFits:
      return "fits";
    case Cause::kAboveThreshold:
      return "above_threshold";
    case Cause::kMinRolloutCells:
      return "min_rollout_cells";
    case Cause::kAllTraining:
      return "all_training";
    case Cause::kNewBatch:
      return "new_batch";
    case Cause::kAllRollingOut:
      return "all_rolling_out";
    case Cause::kResidence:
      return "residence";
    case Cause::kBacklog:
      return "backlog";
    case Cause::kRolloutShort:
      return "rollout_short";
    case Cause::kBalanced:
      return "balanced";
    case Cause::kNoSpeedup:
      return "no_speedup";
    case Cause::kIdleTrainer:
      return "idle_trainer";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& os, Move move) { return os << MoveName(move); }
std::ostream& operator<<(std::ostream& os, Cause cause) { return os << CauseName(cause); }

nlohmann::json SchedulerDecision::ToJson() const {
  return {
      {"type", "scheduler_decision"},
      {"unix_time_s", absl::ToDoubleSeconds(observation.now - absl::UnixEpoch())},
      // Exact, for replaying the decisions: a double of seconds since 1970 keeps 0.2 µs.
      {"unix_time_ns", absl::ToUnixNanos(observation.now)},
      {"step", observation.step},
      {"move", MoveName(move)},
      {"satellite", satellite},
      {"cause", CauseName(cause)},
      {"reason", reason},
      {"unit", WorkUnitName(unit)},
      {"work", work},
      {"threshold", threshold},
      {"dispatched", observation.dispatched},
      {"finished", observation.finished},
      {"in_flight", observation.in_flight()},
      {"remaining_tokens", observation.remaining_tokens},
      {"capacity_per_cell", observation.capacity_per_cell},
      {"new_batch_demanded", observation.new_batch_demanded},
      {"rollout_cells_before", rollout_cells_before},
      {"rollout_cells_after", rollout_cells_after},
      {"admission_room", observation.admission_room},
      {"free_slots", observation.free_slots},
      {"backlog", observation.backlog},
      {"train_seconds_per_unit", observation.train_seconds_per_unit},
      {"batch", observation.batch},
      {"micro_steps", observation.micro_steps},
      {"step_seconds", step_seconds},
      {"backlog_batches", backlog_batches},
      {"backlog_seconds", backlog_seconds},
      {"short_share", short_share},
      {"held", observation.held},
      {"alive", observation.alive},
  };
}

}  // namespace flywheel::scheduler
