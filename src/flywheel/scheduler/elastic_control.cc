#include "flywheel/scheduler/elastic_control.h"

#include <algorithm>

#include "flywheel/core/strings.h"
#include "flywheel/scheduler/backlog_controller.h"

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
                              double episodes_per_cell, double episode_tokens) {
  WaterLevelOptions rule;
  rule.satellites = satellites;
  const bool tokens = options.unit == "tokens";
  rule.unit = tokens ? WorkUnit::kTokens : WorkUnit::kEpisodes;
  rule.capacity_per_cell = tokens ? episodes_per_cell * episode_tokens : episodes_per_cell;
  rule.hysteresis = options.hysteresis;
  rule.min_residence = absl::Seconds(options.min_residence_seconds);
  return rule;
}

absl::StatusOr<std::unique_ptr<RoleController>> MakeElasticController(
    const SchedulerOptions& options, int satellites, double episodes_per_cell,
    double episode_tokens) {
  const WaterLevelOptions rule =
      ElasticRule(options, satellites, episodes_per_cell, episode_tokens);
  if (options.controller == "water_level") {
    absl::StatusOr<WaterLevelPolicy> policy = WaterLevelPolicy::Create(rule);
    if (!policy.ok()) return policy.status();
    return std::make_unique<WaterLevelPolicy>(*std::move(policy));
  }
  BacklogControllerOptions backlog;
  backlog.satellites = satellites;
  backlog.core_cells = static_cast<int>(options.core_cells);
  backlog.capacity_per_cell = rule.capacity_per_cell;
  backlog.unit = rule.unit;
  backlog.hysteresis = rule.hysteresis;
  backlog.min_residence = rule.min_residence;
  backlog.release_backlog_batches = options.release_backlog_batches;
  backlog.recall_backlog_batches = options.recall_backlog_batches;
  backlog.smoothing_steps = options.smoothing_steps;
  backlog.move_interval_steps = options.move_interval_steps;
  absl::StatusOr<BacklogController> controller = BacklogController::Create(backlog);
  if (!controller.ok()) return controller.status();
  return std::make_unique<BacklogController>(*std::move(controller));
}

SchedulerObservation ElasticObservation(absl::Time now, int64_t handed_out, int64_t finished,
                                        int64_t admission_room, int64_t step) {
  SchedulerObservation observation;
  observation.now = now;
  observation.dispatched = handed_out;
  observation.finished = std::min(handed_out, finished);
  observation.new_batch_demanded = admission_room > 0;
  observation.admission_room = std::max<int64_t>(0, admission_room);
  observation.step = step;
  return observation;
}

SchedulerObservation ObserveCells(absl::Time now, int64_t step, int64_t admission_room,
                                  std::span<const SatelliteReport> satellites,
                                  const TrainingReport& training, int64_t parked,
                                  double parked_tokens) {
  SchedulerObservation o;
  o.now = now;
  o.step = step;
  o.admission_room = std::max<int64_t>(0, admission_room);
  o.new_batch_demanded = admission_room > 0;
  int64_t held = parked;
  o.remaining_tokens = parked_tokens;
  for (const SatelliteReport& s : satellites) {
    o.finished += s.finished;
    o.held.push_back(s.alive ? s.held : 0);
    o.alive.push_back(s.alive);
    if (!s.alive) continue;
    held += s.held;
    o.remaining_tokens += s.remaining_tokens;
    if (s.rolling_out) o.free_slots += std::max<int64_t>(0, s.slots - s.held);
  }
  // What is in flight is what the live satellites hold and what is parked: a dead cell's
  // unfinished episodes are lost with it (given back to admission).
  o.dispatched = o.finished + held;
  o.backlog = training.backlog;
  o.train_seconds_per_unit = training.train_seconds_per_unit;
  o.batch = training.batch;
  o.micro_steps = training.micro_steps;
  return o;
}

double AverageMicroSteps(double average, int64_t micro_steps) {
  const double m = static_cast<double>(micro_steps);
  return average > 0 ? average + 0.1 * (m - average) : m;
}

void AddTokenWork(const RemainingTokens& estimate, std::span<const int64_t> in_flight,
                  double episodes_per_cell, SchedulerObservation& observation) {
  observation.remaining_tokens = estimate.Remaining(in_flight);
  observation.capacity_per_cell = episodes_per_cell * estimate.Fresh();
}

int64_t AdmittedEpisodes(std::span<const CellAdmission> cells) {
  int64_t admitted = 0;
  for (const CellAdmission& c : cells) admitted += c.alive ? c.held() : c.finished;
  return admitted;
}

std::vector<int64_t> GrantAdmission(const ElasticAdmission& admission, int64_t steps_done,
                                    std::span<const CellAdmission> cells,
                                    int64_t episodes_per_cell) {
  std::vector<int64_t> grants;
  grants.reserve(cells.size());
  for (const CellAdmission& c : cells) {
    // Taken back first, so that its room goes to the cells still rolling out.
    grants.push_back(c.alive && !c.rolling_out ? c.dispatched : c.admit_until);
  }
  std::vector<CellAdmission> now(cells.begin(), cells.end());
  for (size_t i = 0; i < now.size(); ++i) now[i].admit_until = grants[i];
  int64_t room = admission.Room(steps_done, AdmittedEpisodes(now));
  for (size_t i = 0; i < now.size() && room >= admission.group_size; ++i) {
    const CellAdmission& c = now[i];
    if (!c.alive || !c.rolling_out) continue;
    const int64_t free = episodes_per_cell - (c.held() - c.finished);
    const int64_t groups = std::min(room, free) / admission.group_size;
    if (groups <= 0) continue;
    const int64_t extra = groups * admission.group_size;
    grants[i] = c.held() + extra;
    room -= extra;
  }
  return grants;
}

}  // namespace flywheel::scheduler
