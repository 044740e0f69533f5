#include "flywheel/scheduler/backlog_controller.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "flywheel/core/strings.h"

namespace flywheel::scheduler {

using Move = SchedulerDecision::Move;
using Cause = SchedulerDecision::Cause;

absl::Status BacklogControllerOptions::Validate() const {
  if (satellites < 1) {
    return absl::InvalidArgumentError(
        StrCat("elastic controller: need >= 1 satellite cell (got ", satellites,
               "); raise scheduler.cells above scheduler.core_cells"));
  }
  if (core_cells < 1) {
    return absl::InvalidArgumentError(
        StrCat("elastic controller: scheduler.core_cells must be >= 1 (got ", core_cells, ")"));
  }
  if (!(std::isfinite(capacity_per_cell) && capacity_per_cell > 0)) {
    return absl::InvalidArgumentError(
        StrCat("elastic controller: capacity_per_cell must be > 0 (got ", capacity_per_cell, " ",
               WorkUnitName(unit), ")"));
  }
  if (!(hysteresis >= 0 && hysteresis < 1)) {
    return absl::InvalidArgumentError(
        StrCat("scheduler.hysteresis must be in [0, 1) (got ", hysteresis, ")"));
  }
  if (min_residence < absl::ZeroDuration() || min_residence == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        StrCat("scheduler.min_residence_seconds must be finite and >= 0 (got ",
               absl::FormatDuration(min_residence), ")"));
  }
  if (!(std::isfinite(smoothing_steps) && smoothing_steps >= 0 &&
        std::isfinite(move_interval_steps) && move_interval_steps >= 0)) {
    return absl::InvalidArgumentError(
        StrCat("scheduler.smoothing_steps and scheduler.move_interval_steps must be finite and "
               ">= 0 (got ",
               smoothing_steps, " and ", move_interval_steps, ")"));
  }
  if (min_rollout_cells < 1 || min_rollout_cells > satellites) {
    return absl::InvalidArgumentError(
        StrCat("elastic controller: min_rollout_cells must be in [1, ", satellites, "] (got ",
               min_rollout_cells, "): only satellites generate"));
  }
  if (!(std::isfinite(release_backlog_batches) && std::isfinite(recall_backlog_batches) &&
        recall_backlog_batches >= 0 && release_backlog_batches > recall_backlog_batches)) {
    return absl::InvalidArgumentError(
        StrCat("scheduler.release_backlog_batches (", release_backlog_batches,
               ") must be above scheduler.recall_backlog_batches (", recall_backlog_batches,
               ") >= 0: between the two nothing moves, which is what keeps the split steady"));
  }
  return absl::OkStatus();
}

std::string BacklogControllerOptions::DebugString() const {
  return StrCat(
      "BacklogControllerOptions(satellites=", satellites, ", core_cells=", core_cells,
      ", capacity_per_cell=", capacity_per_cell, " ", WorkUnitName(unit),
      ", hysteresis=", hysteresis, ", min_residence=", absl::FormatDuration(min_residence),
      ", min_rollout_cells=", min_rollout_cells,
      ", release_backlog_batches=", release_backlog_batches,
      ", recall_backlog_batches=", recall_backlog_batches, ", smoothing_steps=", smoothing_steps,
      ", move_interval_steps=", move_interval_steps, ")");
}

absl::StatusOr<BacklogController> BacklogController::Create(BacklogControllerOptions options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return BacklogController(std::move(options));
}

BacklogController::BacklogController(BacklogControllerOptions options)
    : options_(std::move(options)),
      roles_(options_.satellites, CellRole::kRollout),
      last_switch_(options_.satellites, absl::InfinitePast()) {}

CellRole BacklogController::role(int satellite) const {
  ABSL_RAW_CHECK(satellite >= 0 && satellite < options_.satellites, "satellite out of range");
  return roles_[satellite];
}

int BacklogController::rollout_cells() const {
  return static_cast<int>(std::count(roles_.begin(), roles_.end(), CellRole::kRollout));
}

std::string BacklogController::DebugString() const {
  return StrCat("BacklogController(rollout=", rollout_cells(), "/", options_.satellites,
                " satellites, ", options_.DebugString(), ")");
}

absl::Status BacklogController::CheckObservation(const SchedulerObservation& o) const {
  auto bad = [&](std::string_view what) {
    return absl::InvalidArgumentError(
        StrCat("elastic controller observation at step ", o.step, ": ", what));
  };
  if (o.dispatched < 0 || o.finished < 0 || o.finished > o.dispatched) {
    return bad(StrCat("need 0 <= finished <= dispatched (got dispatched=", o.dispatched,
                      ", finished=", o.finished, ")"));
  }
  if (o.admission_room < 0 || o.free_slots < 0) {
    return bad(StrCat("admission_room and free_slots must be >= 0 (got ", o.admission_room, ", ",
                      o.free_slots, ")"));
  }
  for (double v : {o.remaining_tokens, o.capacity_per_cell, o.backlog, o.train_seconds_per_unit}) {
    if (!(std::isfinite(v) && v >= 0)) {
      return bad(
          StrCat("remaining_tokens, capacity_per_cell, backlog and train_seconds_per_unit "
                 "must be finite and >= 0 (got ",
                 o.remaining_tokens, ", ", o.capacity_per_cell, ", ", o.backlog, ", ",
                 o.train_seconds_per_unit, ")"));
    }
  }
  if (!o.held.empty() && static_cast<int>(o.held.size()) != options_.satellites) {
    return bad(
        StrCat("held has ", o.held.size(), " entries for ", options_.satellites, " satellites"));
  }
  if (!o.alive.empty() && static_cast<int>(o.alive.size()) != options_.satellites) {
    return bad(
        StrCat("alive has ", o.alive.size(), " entries for ", options_.satellites, " satellites"));
  }
  if (o.now < last_now_) {
    return bad(StrCat("time went backwards by ", absl::FormatDuration(last_now_ - o.now)));
  }
  return absl::OkStatus();
}

void BacklogController::MeasureStep(const SchedulerObservation& o) {
  if (last_step_ < 0 || o.step < last_step_) {
    last_step_ = o.step;
    last_step_time_ = o.now;
    return;
  }
  if (o.step == last_step_) return;
  const double seconds =
      absl::ToDoubleSeconds(o.now - last_step_time_) / static_cast<double>(o.step - last_step_);
  // The last few steps: a step's duration moves with the split and the load.
  step_seconds_ = step_seconds_ > 0 ? step_seconds_ + 0.25 * (seconds - step_seconds_) : seconds;
  last_step_ = o.step;
  last_step_time_ = o.now;
}

double BacklogController::StepSeconds(const SchedulerObservation& o, int trainers) const {
  // What the trainers there are now would take for one batch: known before any step ended, and
  // at once after a move (a step measured under fewer trainers overstates the next).
  const double training = o.batch * o.train_seconds_per_unit / trainers;
  if (step_seconds_ > 0 && training > 0) return std::min(step_seconds_, training);
  return step_seconds_ > 0 ? step_seconds_ : training;
}

void BacklogController::CountMicroSteps(double average) {
  if (!(average > 0)) return;
  if (micro_steps_ == 0 || std::abs(average - static_cast<double>(micro_steps_)) >= 0.75) {
    micro_steps_ = std::llround(average);
  }
}

void BacklogController::Smooth(absl::Time now, double step_seconds, double backlog,
                               bool short_of_rollout) {
  const double shortage = short_of_rollout ? 1 : 0;
  const double tau = options_.smoothing_steps * step_seconds;
  if (!smoothed_ || !(tau > 0)) {
    smoothed_ = true;
    smoothed_backlog_ = backlog;
    smoothed_short_ = shortage;
    return;
  }
  // An exponential moving average in time: the new observation weighs 1 - e^(-dt / tau).
  const double alpha = 1 - std::exp(-absl::ToDoubleSeconds(now - last_now_) / tau);
  smoothed_backlog_ += alpha * (backlog - smoothed_backlog_);
  smoothed_short_ += alpha * (shortage - smoothed_short_);
}

int BacklogController::LiveCells(const SchedulerObservation& o, CellRole role) const {
  int n = 0;
  for (int s = 0; s < options_.satellites; ++s) n += o.live(s) && roles_[s] == role;
  return n;
}

int BacklogController::ReleaseCandidate(const SchedulerObservation& o) const {
  int best = -1;
  for (int s = options_.satellites - 1; s >= 0; --s) {
    if (roles_[s] != CellRole::kRollout || !o.live(s)) continue;
    if (best < 0 || (!o.held.empty() && o.held[s] < o.held[best])) best = s;
  }
  return best;
}

int BacklogController::RecallCandidate(const SchedulerObservation& o) const {
  int best = -1;
  for (int s = 0; s < options_.satellites; ++s) {
    if (roles_[s] != CellRole::kTrain || !o.live(s)) continue;
    if (best < 0 || last_switch_[s] < last_switch_[best]) best = s;
  }
  return best;
}

void BacklogController::MoveIfResident(int satellite, Move move, Cause cause,
                                       SchedulerDecision& d) const {
  d.satellite = satellite;
  if (satellite < 0) {
    d.cause = cause;
    d.reason = StrCat(d.reason, ", but no live satellite ",
                      move == Move::kToTrain ? "rolls out" : "trains", ": no move");
    return;
  }
  const absl::Duration held = d.observation.now - last_switch_[satellite];
  if (held < options_.min_residence) {
    d.cause = Cause::kResidence;
    d.reason =
        StrCat(d.reason, ", but satellite ", satellite, " switched ", absl::FormatDuration(held),
               " ago < min_residence ", absl::FormatDuration(options_.min_residence), ": no move");
    return;
  }
  d.move = move;
  d.cause = cause;
  d.reason = StrCat(d.reason, ": satellite ", satellite, " to ",
                    move == Move::kToTrain ? "train" : "rollout");
}

namespace {

// Rounds of micro-steps a step of `micro_steps` takes on `trainers` cells, each running whole
// micro-steps.
int64_t Rounds(int64_t micro_steps, int trainers) {
  return (micro_steps + trainers - 1) / trainers;
}

// Whether more trainers than `trainers`, up to `most`, would take a round off: 16 micro-steps
// take 4 rounds on 4 trainers and on 5, but 3 on 6, so the fifth is a step on the way.
bool MoreTrainersHelp(int64_t micro_steps, int trainers, int most) {
  for (int more = trainers + 1; more <= most; ++more) {
    if (Rounds(micro_steps, more) < Rounds(micro_steps, trainers)) return true;
  }
  return false;
}

}  // namespace

void BacklogController::DecideMove(SchedulerDecision& d) const {
  const SchedulerObservation& o = d.observation;
  const int r = d.rollout_cells_before;
  const int satellite_trainers = LiveCells(o, CellRole::kTrain);
  const int trainers = options_.core_cells + satellite_trainers;
  const int64_t micro_steps = micro_steps_;  // 0: not known
  // The most trainers there can be: every live satellite but min_rollout_cells.
  const int most = options_.core_cells + r + satellite_trainers - options_.min_rollout_cells;
  const std::string rounds =
      StrCat(micro_steps, " micro-steps per step take ", Rounds(micro_steps, trainers),
             " rounds on ", trainers, " trainers");
  const std::string w = StrCat("w=", d.work, " ", WorkUnitName(options_.unit));
  const std::string backlog =
      StrCat("backlog ", d.backlog_batches, " batches (", d.backlog_seconds, " s of training)");
  if (d.work > 0 && r < options_.min_rollout_cells) {
    d.reason =
        StrCat(w, " with ", r, " rollout cells < min_rollout_cells ", options_.min_rollout_cells);
    return MoveIfResident(RecallCandidate(o), Move::kToRollout, Cause::kMinRolloutCells, d);
  }
  if (r == 0 && o.admission_room > 0) {
    // Nobody generates and a batch is wanted: whatever waits to be trained, the step being
    // filled can only complete with new rollouts.
    d.reason = StrCat("admission has room (", o.admission_room, ") and no satellite rolls out");
    return MoveIfResident(RecallCandidate(o), Move::kToRollout, Cause::kMinRolloutCells, d);
  }
  if (satellite_trainers > 0 && micro_steps > 0 &&
      Rounds(micro_steps, trainers - 1) == Rounds(micro_steps, trainers) &&
      !MoreTrainersHelp(micro_steps, trainers, most) && (d.work > 0 || o.admission_room > 0)) {
    // A trainer that shortens no step, and leads to no count of trainers that would, is a
    // rollout cell lost; a release gave it only while the steps had other sizes (or before
    // their size was known).
    d.reason = StrCat(rounds, ", as many on ", trainers - 1, ", and no fewer on up to ", most);
    return MoveIfResident(RecallCandidate(o), Move::kToRollout, Cause::kIdleTrainer, d);
  }
  const bool short_of_rollout = d.short_share > 0.5;
  if (short_of_rollout && satellite_trainers > 0 &&
      d.backlog_batches < options_.recall_backlog_batches) {
    d.reason = StrCat("rollout short ", d.short_share, " of the time and ", backlog,
                      " < recall_backlog_batches ", options_.recall_backlog_batches);
    return MoveIfResident(RecallCandidate(o), Move::kToRollout, Cause::kRolloutShort, d);
  }
  if (d.backlog_batches <= options_.release_backlog_batches) {
    d.cause = Cause::kBalanced;
    d.reason =
        StrCat(backlog, " <= release_backlog_batches ", options_.release_backlog_batches,
               short_of_rollout ? ", rollout short but backlog not below recall_backlog_batches"
                                : ", rollout not short",
               ": no move");
    return;
  }
  if (r == 0) {
    d.cause = Cause::kAllTraining;
    d.reason = StrCat(backlog, " and all ", satellite_trainers, " live satellites train: no move");
    return;
  }
  if (d.work > 0 && r <= options_.min_rollout_cells) {
    d.cause = Cause::kMinRolloutCells;
    d.reason = StrCat(backlog, " but ", w, " still to generate on ", r,
                      " rollout cells = min_rollout_cells: no move");
    return;
  }
  if (micro_steps > 0 && !MoreTrainersHelp(micro_steps, trainers, most)) {
    d.cause = Cause::kNoSpeedup;
    d.reason = StrCat(backlog, " > ", options_.release_backlog_batches, " but ", rounds,
                      " and no fewer on up to ", most, ": no move");
    return;
  }
  const double capacity =
      o.capacity_per_cell > 0 ? o.capacity_per_cell : options_.capacity_per_cell;
  const std::string rule =
      StrCat(d.threshold, " = ", r - 1, " x ", capacity, " x (1 - ", options_.hysteresis, ")");
  if (d.work > d.threshold) {
    d.cause = Cause::kAboveThreshold;
    d.reason =
        StrCat(backlog, " > ", options_.release_backlog_batches, " but ", w, " does not fit ",
               r - 1, " rollout cells: ", d.work, " > ", rule, ": no move");
    return;
  }
  d.reason = StrCat(backlog, " > release_backlog_batches ", options_.release_backlog_batches,
                    " and ", w, " fits ", r - 1, " rollout cells: ", d.work, " <= ", rule);
  MoveIfResident(ReleaseCandidate(o), Move::kToTrain, Cause::kBacklog, d);
}

absl::StatusOr<SchedulerDecision> BacklogController::Decide(const SchedulerObservation& o) {
  if (absl::Status s = CheckObservation(o); !s.ok()) return s;
  SchedulerDecision d;
  d.observation = o;
  d.unit = options_.unit;
  d.work =
      options_.unit == WorkUnit::kTokens ? o.remaining_tokens : static_cast<double>(o.in_flight());
  // Free slots neither generate nor train: the rules count live cells only.
  const int r = LiveCells(o, CellRole::kRollout);
  d.rollout_cells_before = r;
  const double capacity =
      o.capacity_per_cell > 0 ? o.capacity_per_cell : options_.capacity_per_cell;
  d.threshold = r > 0 ? (r - 1) * capacity * (1 - options_.hysteresis) : 0;
  // The backlog is the queue between rollout and training: near empty, the trainers run dry;
  // near the admission window (η + 1 batches), rollout waits for them. Measured in batches it
  // needs no training cost and holds at any scale.
  MeasureStep(o);
  CountMicroSteps(o.micro_steps);
  const int trainers = options_.core_cells + LiveCells(o, CellRole::kTrain);
  d.step_seconds = StepSeconds(o, trainers);
  Smooth(o.now, d.step_seconds, o.backlog, o.admission_room > o.free_slots);
  d.backlog_seconds = smoothed_backlog_ * o.train_seconds_per_unit / trainers;
  d.backlog_batches = o.batch > 0 ? smoothed_backlog_ / o.batch : 0;
  d.short_share = smoothed_short_;
  DecideMove(d);

  const absl::Duration interval = absl::Seconds(options_.move_interval_steps * d.step_seconds);
  if (d.move != Move::kNone && o.now - last_move_ < interval) {
    d.move = Move::kNone;
    d.cause = Cause::kResidence;
    d.reason = StrCat(d.reason, ", but the last move was ",
                      absl::FormatDuration(o.now - last_move_), " ago < move_interval_steps ",
                      options_.move_interval_steps, " x ", d.step_seconds, " s: no move");
  }
  if (d.move != Move::kNone) {
    roles_[d.satellite] = d.move == Move::kToTrain ? CellRole::kTrain : CellRole::kRollout;
    last_switch_[d.satellite] = o.now;
    last_move_ = o.now;
  }
  d.rollout_cells_after = LiveCells(o, CellRole::kRollout);
  d.changed = d.move != Move::kNone || !has_last_cause_ || d.cause != last_cause_;
  has_last_cause_ = true;
  last_cause_ = d.cause;
  last_now_ = o.now;
  return d;
}

}  // namespace flywheel::scheduler
