#include "flywheel/elastic/control_plane.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/scheduler/hand_over.h"

namespace flywheel {
namespace {

using scheduler::CellRole;
using scheduler::SchedulerDecision;

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

v1::CellRole WireRole(CellRole role) {
  return role == CellRole::kTrain ? v1::CELL_ROLE_TRAIN : v1::CELL_ROLE_ROLLOUT;
}

absl::Status NoSuchCell(int cell) {
  return absl::NotFoundError(
      StrCat("unknown cell ", cell, ": call Register first (it hands out the cell ids)"));
}

}  // namespace

absl::Status ControlPlaneOptions::Validate() const {
  RETURN_IF_ERROR(scheduler.Validate());
  RETURN_IF_ERROR(admission.Validate());
  if (config_hash.empty() || model_hash.empty()) {
    return absl::InvalidArgumentError(
        "elastic control plane: config_hash and model_hash must be set (cells are checked "
        "against them)");
  }
  if (heartbeat_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("elastic control plane: heartbeat_interval must be > 0");
  }
  if (heartbeat_timeout < 2 * heartbeat_interval) {
    return absl::InvalidArgumentError(
        StrCat("elastic control plane: heartbeat_timeout (", Seconds(heartbeat_timeout),
               " s) must cover two heartbeats (interval ", Seconds(heartbeat_interval), " s)"));
  }
  if (episodes_per_cell < 1) {
    return absl::InvalidArgumentError("elastic control plane: episodes_per_cell must be >= 1");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ControlPlane>> ControlPlane::Create(ControlPlaneOptions options,
                                                                   scheduler::SchedulerLog* log,
                                                                   Requeue requeue) {
  RETURN_IF_ERROR(options.Validate());
  ASSIGN_OR_RETURN(
      std::unique_ptr<scheduler::RoleController> roles,
      scheduler::MakeElasticController(options.scheduler, options.satellites(),
                                       static_cast<double>(options.episodes_per_cell)));
  return std::unique_ptr<ControlPlane>(
      new ControlPlane(std::move(options), log, std::move(requeue), std::move(roles)));
}

ControlPlane::ControlPlane(ControlPlaneOptions options, scheduler::SchedulerLog* log,
                           Requeue requeue, std::unique_ptr<scheduler::RoleController> roles)
    : options_(std::move(options)),
      log_(log),
      requeue_(std::move(requeue)),
      roles_(std::move(roles)),
      next_cell_(options_.core_cells()),
      slot_cell_(options_.satellites(), -1),
      start_(absl::Now()) {
  spdlog::info("elastic control plane: {} satellite slots; {}", options_.satellites(),
               roles_->DebugString());
  monitor_ = std::thread([this] { Monitor(); });
}

ControlPlane::~ControlPlane() { Stop(); }

void ControlPlane::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (monitor_.joinable()) monitor_.join();
}

// ---- A cell's calls ----------------------------------------------------------------------------

absl::StatusOr<v1::RegisterResponse> ControlPlane::Register(const v1::RegisterRequest& request) {
  const std::string& name = request.name();
  std::vector<std::string> mismatches;
  if (request.config_hash() != options_.config_hash) {
    mismatches.push_back(StrCat("its config hash '", request.config_hash(),
                                "' differs from the core's '", options_.config_hash,
                                "': start it with the core's config file and --set overrides"));
  }
  if (request.model_hash() != options_.model_hash) {
    mismatches.push_back(StrCat("its model hash '", request.model_hash(),
                                "' differs from the core's '", options_.model_hash,
                                "': give it the core's model (model.* keys, checkpoint)"));
  }
  if (!mismatches.empty()) {
    return absl::FailedPreconditionError(
        StrCat("cell ", name, " refused: ", flywheel::Join(mismatches, "; and ")));
  }
  absl::MutexLock lock(&mu_);
  CellInfo cell;
  cell.cell = next_cell_++;
  cell.name = name;
  cell.last_seen = absl::Now();
  cells_[cell.cell] = cell;
  ++summary_.cells_registered;
  ++events_;
  spdlog::info("scheduler: cell {} registered ({})", cell.cell, name);
  v1::RegisterResponse response;
  response.set_cell(cell.cell);
  response.set_core_cell(0);
  response.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  response.set_heartbeat_timeout_ms(absl::ToInt64Milliseconds(options_.heartbeat_timeout));
  response.set_store_address(options_.store_address);
  response.set_weights_address(options_.weights_address);
  return response;
}

absl::Status ControlPlane::CheckCell(int cell) {
  absl::MutexLock lock(&mu_);
  auto it = cells_.find(cell);
  if (it == cells_.end()) return NoSuchCell(cell);
  if (it->second.dead) {
    return absl::FailedPreconditionError(StrCat(
        "cell ", cell, " was declared dead (no heartbeat for ", Seconds(options_.heartbeat_timeout),
        " s) and its micro-steps re-queued; register again as a new cell"));
  }
  it->second.last_seen = absl::Now();
  return absl::OkStatus();
}

absl::StatusOr<v1::HeartbeatResponse> ControlPlane::Heartbeat(const v1::HeartbeatRequest& r) {
  RETURN_IF_ERROR(CheckCell(r.cell()));
  if (r.dispatched() < 0 || r.finished() < 0 || r.finished() > r.dispatched()) {
    return absl::InvalidArgumentError(
        StrCat("cell ", r.cell(), " reports ", r.finished(), " of ", r.dispatched(),
               " episodes finished: counts must be 0 <= finished <= dispatched"));
  }
  absl::MutexLock lock(&mu_);
  CellInfo& cell = cells_.at(r.cell());
  if (cell.reported_role != r.role()) ++events_;  // a switch completes, or a cell starts
  cell.reported_role = r.role();
  // Counts only grow: a reply reordered behind a newer one must not take admission back. A cell
  // that handed episodes over reports them as no longer dispatched by it: its counts are taken
  // as they come while it is in process (it has no wire to reorder them).
  cell.dispatched = r.episodes_handed() > cell.episodes_handed
                        ? r.dispatched()
                        : std::max(cell.dispatched, r.dispatched());
  cell.finished = std::max(cell.finished, r.finished());
  cell.episodes_handed = std::max(cell.episodes_handed, r.episodes_handed());
  cell.finished_in_place = std::max(cell.finished_in_place, r.finished_in_place());
  cell.weights_version = r.weights_version();
  cell.remaining_tokens =
      std::isfinite(r.remaining_tokens()) ? std::max(0.0, r.remaining_tokens()) : 0.0;
  v1::HeartbeatResponse response;
  response.set_role(cell.role);
  response.set_step(step_);
  response.set_finished(finished_);
  response.set_admit_until(cell.admit_until);
  response.set_admit_version(cell.admit_version);
  return response;
}

absl::Status ControlPlane::AtStep(int cell, int64_t step, const char* what,
                                  absl::FunctionRef<absl::Status(int64_t, int64_t)> f) {
  absl::MutexLock lock(&mu_);
  if (step != step_) {
    return absl::FailedPreconditionError(
        StrCat("cell ", cell, " ", what, " step ", step, " but the current step is ", step_));
  }
  return f(version_, optimizer_step_);
}

int64_t ControlPlane::step() const {
  absl::MutexLock lock(&mu_);
  return step_;
}

absl::StatusOr<int64_t> ControlPlane::Exit(int cell) {
  RETURN_IF_ERROR(CheckCell(cell));
  absl::MutexLock lock(&mu_);
  CellInfo& info = cells_.at(cell);
  info.left = true;
  DeclareDead(info, absl::ZeroDuration());
  return info.requeued;
}

void ControlPlane::Monitor() {
  const absl::Duration tick = options_.heartbeat_interval / 2;
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick)) {
    const absl::Time now = absl::Now();
    for (auto& [id, cell] : cells_) {
      const absl::Duration silent = now - cell.last_seen;
      if (!cell.dead && silent > options_.heartbeat_timeout) DeclareDead(cell, silent);
    }
  }
}

void ControlPlane::DeclareDead(CellInfo& cell, absl::Duration silent) {
  cell.dead = true;
  ++events_;
  absl::StatusOr<int64_t> requeued = step_ >= 0 ? requeue_(cell.cell) : absl::StatusOr<int64_t>(0);
  if (requeued.ok()) cell.requeued = *requeued;
  if (cell.left) {
    spdlog::info("scheduler: cell {} ({}) left; {} micro-steps re-queued", cell.cell, cell.name,
                 requeued.value_or(0));
    return;
  }
  ++summary_.cells_lost;
  if (requeued.ok()) {
    spdlog::warn(
        "scheduler: cell {} ({}) sent nothing for {:.2f} s (heartbeat_timeout {:.2f} s): declared "
        "dead, {} micro-steps of step {} re-queued",
        cell.cell, cell.name, Seconds(silent), Seconds(options_.heartbeat_timeout), *requeued,
        step_);
  } else {
    spdlog::warn("scheduler: cell {} ({}) sent nothing for {:.2f} s: declared dead ({})", cell.cell,
                 cell.name, Seconds(silent), requeued.status().message());
  }
}

// ---- The core's side ---------------------------------------------------------------------------

absl::Status ControlPlane::BeginStep(int64_t step, int64_t version, int64_t optimizer_step,
                                     absl::FunctionRef<absl::Status()> begin) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(begin());
  step_ = step;
  version_ = version;
  optimizer_step_ = optimizer_step;
  ++events_;
  return absl::OkStatus();
}

void ControlPlane::StepEnded(int64_t steps_done, int64_t optimizer_step,
                             int64_t published_version) {
  absl::MutexLock lock(&mu_);
  steps_done_ = steps_done;
  optimizer_step_ = optimizer_step;
  published_ = published_version;
  ++events_;
}

int64_t ControlPlane::AwaitEvent(int64_t seen, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto changed = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || events_ != seen; };
  mu_.AwaitWithDeadline(absl::Condition(&changed), deadline);
  return events_;
}

void ControlPlane::Notify() {
  absl::MutexLock lock(&mu_);
  ++events_;
}

void ControlPlane::SetStart(absl::Time start) {
  absl::MutexLock lock(&mu_);
  start_ = start;
}

void ControlPlane::SetFinished() {
  absl::MutexLock lock(&mu_);
  finished_ = true;
}

nlohmann::json ControlPlane::Event(std::string_view kind, absl::Time now) const {
  return {{"event", kind}, {"at_s", Seconds(now - start_)}};
}

void ControlPlane::UpdateSlots(absl::Time now, std::vector<nlohmann::json>& lines) {
  // Free the slots of dead cells.
  for (int& cell : slot_cell_) {
    if (cell < 0) continue;
    const CellInfo& info = cells_.at(cell);
    if (!info.dead) continue;
    spdlog::warn("elastic core: cell {} ({}) {}; its satellite slot is free", cell, info.name,
                 info.left ? "left" : "was declared dead");
    nlohmann::json line = Event(info.left ? "cell_left" : "cell_lost", now);
    line["cell"] = cell;
    line["requeued_micro_steps"] = info.requeued;
    lines.push_back(std::move(line));
    std::erase_if(pending_, [&](const PendingSwitch& p) { return p.cell == cell; });
    cell = -1;
  }
  // Give free slots to running cells not placed yet (after their first heartbeat), lowest first.
  for (auto& [id, info] : cells_) {
    if (info.dead || info.role != v1::CELL_ROLE_ROLLOUT ||
        info.reported_role == v1::CELL_ROLE_UNSPECIFIED ||
        std::find(slot_cell_.begin(), slot_cell_.end(), id) != slot_cell_.end()) {
      continue;
    }
    auto free = std::find(slot_cell_.begin(), slot_cell_.end(), -1);
    if (free == slot_cell_.end()) break;
    *free = id;
    const int slot = static_cast<int>(free - slot_cell_.begin());
    // The cell starts rolling out; the controller may have this slot training.
    if (roles_->role(slot) == CellRole::kTrain) {
      info.role = v1::CELL_ROLE_TRAIN;
      pending_.push_back({.cell = id, .satellite = slot, .to_train = true, .asked = now});
    }
    nlohmann::json line = Event("cell_placed", now);
    line["cell"] = id;
    line["name"] = info.name;
    line["satellite"] = slot;
    lines.push_back(std::move(line));
  }
}

std::vector<scheduler::CellAdmission> ControlPlane::Admissions() const {
  std::vector<scheduler::CellAdmission> admissions;
  for (const auto& [id, c] : cells_) {
    admissions.push_back({.alive = !c.dead,
                          .rolling_out = c.rolling_out(),
                          .dispatched = c.dispatched,
                          .finished = c.finished,
                          .admit_until = c.admit_until});
  }
  return admissions;
}

absl::StatusOr<SchedulerDecision> ControlPlane::Decide(absl::Time now, const TickInputs& in) {
  // The satellites as the controller sees them: a free slot holds nothing.
  std::vector<scheduler::SatelliteReport> reports;
  for (const int id : slot_cell_) {
    scheduler::SatelliteReport r;
    r.alive = id >= 0;
    if (r.alive) {
      const CellInfo& c = cells_.at(id);
      r.rolling_out = c.rolling_out();
      r.dispatched = c.dispatched;
      r.finished = c.finished;
      // What it was granted counts as held: those episodes start as soon as it reads its reply
      // (and its engine holds the weights they are granted for).
      r.held = std::max(c.admit_until, c.dispatched) - c.finished;
      r.slots = options_.episodes_per_cell;
      r.remaining_tokens = c.remaining_tokens;
    }
    reports.push_back(r);
  }
  // In flight on no satellite: parked, being delivered, or on cells outside the slots. In
  // tokens, a handed-over episode is expected to generate what a fresh one does (its history is
  // prefilled again, not generated): without it, work waiting for a taker would count as none.
  const int64_t in_transit = static_cast<int64_t>(in.parked.size()) + in.delivering;
  int64_t elsewhere = in_transit;
  double elsewhere_tokens = static_cast<double>(in_transit) * in.episode_tokens;
  int64_t in_flight = in_transit;
  for (const auto& [id, c] : cells_) {
    if (c.dead) continue;
    const int64_t held = std::max(c.admit_until, c.dispatched) - c.finished;
    in_flight += held;
    if (std::find(slot_cell_.begin(), slot_cell_.end(), id) == slot_cell_.end()) {
      elsewhere += held;
      elsewhere_tokens += c.remaining_tokens;
    }
  }
  summary_.episodes_in_flight = in_flight;
  // Parked episodes hold admission (those being delivered are in their taker's grant already).
  const int64_t room =
      options_.admission.Room(steps_done_, scheduler::AdmittedEpisodes(Admissions()) +
                                               static_cast<int64_t>(in.parked.size()));
  scheduler::SchedulerObservation observation = scheduler::ObserveCells(
      now, optimizer_step_, room, reports, in.training, elsewhere, elsewhere_tokens);
  if (roles_->unit() == scheduler::WorkUnit::kTokens) {
    observation.capacity_per_cell =
        static_cast<double>(options_.episodes_per_cell) * in.episode_tokens;
  }
  return roles_->Decide(observation);
}

void ControlPlane::Move(const SchedulerDecision& decision, absl::Time now) {
  const int id = slot_cell_[decision.satellite];
  if (id < 0) return;  // a free slot: the next cell placed there takes the role
  CellInfo& cell = cells_.at(id);
  const bool to_train = decision.move == SchedulerDecision::Move::kToTrain;
  cell.role = WireRole(roles_->role(decision.satellite));
  // A move that reverses one the cell has not completed cancels it: the cell stays in the role
  // it reports, and no switch is timed.
  if (std::erase_if(pending_, [&](const PendingSwitch& p) { return p.cell == id; }) == 0) {
    pending_.push_back({.cell = id,
                        .satellite = decision.satellite,
                        .to_train = to_train,
                        .asked = now,
                        .handed = cell.episodes_handed,
                        .in_place = cell.finished_in_place});
  }
}

void ControlPlane::CompleteSwitches(absl::Time now, std::vector<SwitchRecord>& done) {
  // A switch ends when the cell's heartbeat reports the new role.
  // The lambda runs under the caller's lock; the analysis does not see into std::erase_if.
  std::erase_if(pending_, [&](const PendingSwitch& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const CellInfo& info = cells_.at(p.cell);
    const v1::CellRole wanted = p.to_train ? v1::CELL_ROLE_TRAIN : v1::CELL_ROLE_ROLLOUT;
    if (info.reported_role != wanted) return false;
    SwitchRecord record;
    record.satellite = p.satellite;
    record.to_train = p.to_train;
    record.seconds = Seconds(now - p.asked);
    record.episodes_handed = info.episodes_handed - p.handed;
    record.finished_in_place = info.finished_in_place - p.in_place;
    record.at = Seconds(now - start_);
    done.push_back(record);
    return true;
  });
}

std::vector<int> ControlPlane::Place(const std::vector<double>& parked, absl::Time now,
                                     std::vector<nlohmann::json>& lines) {
  std::vector<int> takers;  // cell ids, as indices of `capacity`
  std::vector<scheduler::CellCapacity> capacity;
  for (const auto& [id, c] : cells_) {
    if (!c.rolling_out()) continue;
    takers.push_back(id);
    // Its grant counts as held: the cell may start that many episodes before it reads a reply.
    capacity.push_back({.episodes = std::max(c.admit_until, c.dispatched) - c.finished,
                        .slots = options_.episodes_per_cell});
  }
  const std::vector<int> placed = scheduler::PlaceEpisodes(parked, capacity);
  std::vector<int> cell_of(parked.size(), -1);
  std::vector<int64_t> given(takers.size(), 0);
  for (size_t e = 0; e < parked.size(); ++e) {
    if (placed[e] < 0) continue;
    cell_of[e] = takers[placed[e]];
    ++given[placed[e]];
  }
  for (size_t t = 0; t < takers.size(); ++t) {
    if (given[t] == 0) continue;
    CellInfo& c = cells_.at(takers[t]);
    c.admit_until = std::max(c.admit_until, c.dispatched) + given[t];  // the adopted ones' slots
    summary_.episodes_placed += given[t];
    summary_.max_taker_held = std::max(summary_.max_taker_held, capacity[t].episodes);
    nlohmann::json line = Event("hand_over", now);
    line["cell"] = takers[t];
    line["episodes"] = given[t];
    line["held_after"] = capacity[t].episodes;
    line["slots"] = options_.episodes_per_cell;
    lines.push_back(std::move(line));
  }
  return cell_of;
}

void ControlPlane::Grant(int64_t in_transit) {
  std::vector<scheduler::CellAdmission> admissions = Admissions();
  // Episodes in transit hold admission as if a cell held them.
  admissions.push_back({.alive = true, .rolling_out = false, .dispatched = in_transit});
  const std::vector<int64_t> grants = scheduler::GrantAdmission(
      options_.admission, steps_done_, admissions, options_.episodes_per_cell);
  size_t i = 0;
  int training = 0;
  for (auto& [id, c] : cells_) {
    const int64_t grant = grants[i++];
    if (c.dead) continue;
    training += c.reported_role == v1::CELL_ROLE_TRAIN;
    if (grant != c.admit_until) {
      c.admit_until = grant;
      c.admit_version = published_;
    }
  }
  summary_.satellites_training = training;
}

absl::StatusOr<std::vector<int>> ControlPlane::Tick(absl::Time now, const TickInputs& inputs) {
  std::vector<nlohmann::json> lines;
  std::vector<SwitchRecord> switches;
  std::vector<int> placements;
  {
    absl::MutexLock lock(&mu_);
    UpdateSlots(now, lines);
    ASSIGN_OR_RETURN(SchedulerDecision decision, Decide(now, inputs));
    if (decision.changed || options_.scheduler.log_every_decision) {
      lines.push_back(decision.ToJson());
    }
    if (decision.move != SchedulerDecision::Move::kNone) Move(decision, now);
    CompleteSwitches(now, switches);
    for (const SwitchRecord& s : switches) {
      lines.push_back(s.ToJson());
      summary_.switches.push_back(s);
    }
    // Parked episodes first, so that a new episode never takes the slot an old one waits for.
    placements = Place(inputs.parked, now, lines);
    // Those placed are in their taker's grant now; those still parked hold admission themselves.
    Grant(std::count(placements.begin(), placements.end(), -1));
  }
  for (const SwitchRecord& s : switches) RecordSwitchMetrics(s);
  if (log_ != nullptr) {
    for (const nlohmann::json& line : lines) RETURN_IF_ERROR(log_->Append(line));
  }
  return placements;
}

// ---- Reports and tests -------------------------------------------------------------------------

absl::Status ControlPlane::SetRole(int cell, v1::CellRole role) {
  absl::MutexLock lock(&mu_);
  auto it = cells_.find(cell);
  if (it == cells_.end()) return NoSuchCell(cell);
  it->second.role = role;
  return absl::OkStatus();
}

absl::Status ControlPlane::SetAdmission(int cell, int64_t admit_until, int64_t admit_version) {
  absl::MutexLock lock(&mu_);
  auto it = cells_.find(cell);
  if (it == cells_.end()) return NoSuchCell(cell);
  it->second.admit_until = admit_until;
  it->second.admit_version = admit_version;
  return absl::OkStatus();
}

std::vector<CellInfo> ControlPlane::cells() const {
  absl::MutexLock lock(&mu_);
  std::vector<CellInfo> out;
  for (const auto& [id, cell] : cells_) out.push_back(cell);
  return out;
}

ControlSummary ControlPlane::Summary() const {
  absl::MutexLock lock(&mu_);
  ControlSummary summary = summary_;
  for (const auto& [id, c] : cells_) summary.episodes_handed += c.episodes_handed;
  return summary;
}

absl::Status ControlPlane::AwaitDead(int cell, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto dead = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    auto it = cells_.find(cell);
    return it != cells_.end() && it->second.dead;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&dead), deadline)) {
    return absl::DeadlineExceededError(StrCat("scheduler: cell ", cell, " is still alive"));
  }
  return absl::OkStatus();
}

absl::Status ControlPlane::AwaitRegistered(int count, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto registered = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(cells_.size()) >= count;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&registered), deadline)) {
    return absl::DeadlineExceededError(
        StrCat("scheduler: ", cells_.size(), " of ", count, " cells registered"));
  }
  return absl::OkStatus();
}

absl::Status ControlPlane::AwaitAllGone(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto gone = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return std::all_of(cells_.begin(), cells_.end(), [](const auto& c) { return c.second.dead; });
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&gone), deadline)) {
    return absl::DeadlineExceededError("scheduler: cells still registered");
  }
  return absl::OkStatus();
}

}  // namespace flywheel
