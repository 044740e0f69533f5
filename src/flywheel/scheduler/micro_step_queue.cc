#include "flywheel/scheduler/micro_step_queue.h"

#include <algorithm>
#include <utility>

#include "flywheel/core/metrics.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

PackerOptions WithCarryOver(PackerOptions o, bool carry_over) {
  o.carry_over = carry_over;
  o.normalise_weights = false;  // D is applied once per step (micro_step.h)
  return o;
}

}  // namespace

MicroStepQueueOptions MicroStepQueueOptions::FromLearnerOptions(const LearnerOptions& o,
                                                                int core_cell, int core_cells) {
  MicroStepQueueOptions out;
  out.packer = PackerOptions::FromLearnerOptions(o);
  out.advantages = AdvantageOptions::FromLearnerOptions(o);
  out.max_staleness = o.max_staleness;
  out.core_cell = core_cell;
  out.core_cells = core_cells;
  return out;
}

absl::Status MicroStepQueueOptions::Validate() const {
  const std::vector<int64_t>& b = packer.buckets;
  if (b.empty() || !std::is_sorted(b.begin(), b.end()) || b.front() <= 0) {
    return absl::InvalidArgumentError(
        StrCat("micro-step queue: learner.buckets must be positive and ascending; got [",
               Join(b, ", "), "]"));
  }
  if (packer.token_budget < b.back()) {
    return absl::InvalidArgumentError(
        StrCat("micro-step queue: learner.token_budget (", packer.token_budget,
               ") must hold a row of the largest bucket (", b.back(), ")"));
  }
  if (advantages.kind == AdvantageKind::kVtrace) {
    return absl::InvalidArgumentError(
        "micro-step queue: learner.advantage = \"vtrace\" needs a value head; streaming steps "
        "compute advantages per group as they arrive");
  }
  if (max_staleness < -1) {
    return absl::InvalidArgumentError(
        StrCat("micro-step queue: learner.max_staleness = ", max_staleness, " (-1 = no bound)"));
  }
  if (core_cell < 0) {
    return absl::InvalidArgumentError(StrCat("micro-step queue: core cell ", core_cell, " < 0"));
  }
  if (core_cells < 1) {
    return absl::InvalidArgumentError(StrCat("micro-step queue: core_cells = ", core_cells,
                                             "; at least one cell must own the optimiser"));
  }
  return absl::OkStatus();
}

std::string MicroStepQueueOptions::DebugString() const {
  return StrCat("MicroStepQueueOptions{buckets=[", Join(packer.buckets, ","),
                "] token_budget=", packer.token_budget, " max_staleness=", max_staleness,
                " core_cell=", core_cell, " core_cells=", core_cells, "}");
}

std::string StepReport::DebugString() const {
  std::string ran;
  for (const auto& [cell, ids] : ran_by) ran += StrCat(" cell ", cell, ": [", Join(ids, ","), "]");
  return StrCat("step ", step, " (version ", version, "): ", micro_steps,
                " micro-steps, D=", normaliser, ", ", claims, " claims, ", requeued,
                " requeued, dead [", Join(dead, ","), "], ran:", ran, ", kept ", kept, ", dropped ",
                dropped_stale, " stale and ", dropped_too_long, " too long",
                complete ? ", complete" : "");
}

MicroStepQueue::MicroStepQueue(MicroStepQueueOptions options)
    : options_(std::move(options)),
      init_status_(options_.Validate()),
      staleness_(options_.max_staleness),
      packer_(WithCarryOver(options_.packer,
                            options_.packer.aggregation != LossAggregation::kExecutionMean)),
      flush_packer_(WithCarryOver(options_.packer, false)) {}

MicroStepQueue::~MicroStepQueue() = default;

absl::Status MicroStepQueue::CheckStep(int64_t step, const char* what) const {
  if (step_ < 0) {
    return absl::FailedPreconditionError(
        StrCat("micro-step queue: ", what, " step ", step, " before any step began"));
  }
  if (step != step_) {
    return absl::FailedPreconditionError(
        StrCat("micro-step queue: ", what, " step ", step, " but the current step is ", step_));
  }
  return absl::OkStatus();
}

absl::Status MicroStepQueue::BeginStep(int64_t step, int64_t version) {
  RETURN_IF_ERROR(init_status_);
  absl::MutexLock pack_lock(&pack_mu_);
  absl::MutexLock lock(&mu_);
  if (cancelled_) return absl::CancelledError("micro-step queue: cancelled");
  if (step_ >= 0 && !complete_) {
    return absl::FailedPreconditionError(StrCat("micro-step queue: beginning step ", step,
                                                " while step ", step_, " is not complete (",
                                                DebugStringLocked(), ")"));
  }
  if (step <= step_) {
    return absl::InvalidArgumentError(
        StrCat("micro-step queue: step ", step, " does not follow step ", step_));
  }
  accepting_ = true;
  pack_step_ = step;
  pack_version_ = version;
  buffer_.clear();
  buffer_advantages_.clear();
  buffered_tokens_ = 0;
  groups_seen_.clear();
  executions_seen_.clear();

  step_ = step;
  version_ = version;
  closed_ = complete_ = false;
  slots_.clear();
  pending_.clear();
  done_ = 0;
  joined_.clear();
  dead_.clear();
  normaliser_ = 0;
  report_ = StepReport{};
  report_.step = step;
  report_.version = version;
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::Status MicroStepQueue::AwaitStep(int64_t step, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (!cancelled_ && step_ < step) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) break;
  }
  if (cancelled_) return absl::CancelledError("micro-step queue: cancelled");
  if (step_ < step) {
    return absl::DeadlineExceededError(StrCat(
        "micro-step queue: step ", step, " did not begin by the deadline (current ", step_, ")"));
  }
  return absl::OkStatus();
}

absl::Status MicroStepQueue::Add(std::vector<Trajectory> batch) {
  if (batch.empty()) return absl::OkStatus();
  absl::MutexLock pack_lock(&pack_mu_);
  if (!accepting_) {
    return absl::FailedPreconditionError(
        pack_step_ < 0 ? std::string("micro-step queue: Add before any step began")
                       : StrCat("micro-step queue: Add to step ", pack_step_, " after Close"));
  }
  const std::string context =
      StrCat("micro-step queue, step ", pack_step_, ": adding ", batch.size(), " trajectories");
  // Check everything before taking anything: a bad Add leaves the step as it was.
  const int64_t largest = options_.packer.buckets.back();
  const bool by_execution = options_.packer.aggregation == LossAggregation::kExecutionMean;
  for (const Trajectory& t : batch) {
    RETURN_IF_ERROR(Annotate(t.Validate(), context));
    if (!t.group_id.empty() && groups_seen_.count(t.group_id)) {
      return absl::InvalidArgumentError(StrCat(
          context, ": group '", t.group_id, "' (trajectory '", t.id,
          "') arrived in an earlier Add of this step; a group must arrive whole, its advantages "
          "are normalised over it"));
    }
    if (by_execution && !t.execution_id.empty() && executions_seen_.count(t.execution_id)) {
      return absl::InvalidArgumentError(
          StrCat(context, ": execution '", t.execution_id, "' (trajectory '", t.id,
                 "') arrived in an earlier Add; with learner.aggregation = \"execution_mean\" an "
                 "execution must arrive whole"));
    }
    if (t.size() > largest && options_.packer.too_long == TooLongPolicy::kError) {
      return absl::InvalidArgumentError(
          StrCat(context, ": trajectory '", t.id, "' has ", t.size(),
                 " tokens, longer than the largest bucket ", largest,
                 " (learner.buckets); add a larger bucket or set learner.too_long = \"drop\""));
    }
  }
  std::set<std::string> groups, executions;
  for (const Trajectory& t : batch) {
    if (!t.group_id.empty()) groups.insert(t.group_id);
    if (!t.execution_id.empty()) executions.insert(t.execution_id);
  }
  const auto too_long = std::remove_if(batch.begin(), batch.end(),
                                       [&](const Trajectory& t) { return t.size() > largest; });
  const int64_t dropped_too_long = batch.end() - too_long;
  batch.erase(too_long, batch.end());
  if (dropped_too_long > 0) {
    MetricsRegistry::Global()
        .GetCounter("learner.dropped{reason=too_long}")
        ->Increment(dropped_too_long);
  }
  StalenessReport staleness = staleness_.Apply(pack_version_, batch);
  absl::StatusOr<std::vector<std::vector<float>>> advantages =
      ComputeAdvantages(batch, options_.advantages);
  if (!advantages.ok()) return Annotate(advantages.status(), context);
  groups_seen_.insert(groups.begin(), groups.end());
  executions_seen_.insert(executions.begin(), executions.end());
  for (size_t i = 0; i < batch.size(); ++i) {
    buffered_tokens_ += batch[i].size();
    buffer_.push_back(std::move(batch[i]));
    buffer_advantages_.push_back(std::move((*advantages)[i]));
  }
  PackedStep packed;
  if (buffered_tokens_ >= options_.packer.token_budget) {
    ASSIGN_OR_RETURN(packed, PackBuffer(/*flush=*/false));
  }
  absl::MutexLock lock(&mu_);
  report_.kept += static_cast<int64_t>(batch.size());
  report_.dropped_stale += staleness.dropped;
  for (const auto& [lag, count] : staleness.lag_counts) report_.lag_counts[lag] += count;
  report_.dropped_too_long += dropped_too_long;
  Publish(std::move(packed));
  return absl::OkStatus();
}

absl::StatusOr<PackedStep> MicroStepQueue::PackBuffer(bool flush) {
  if (buffer_.empty()) return PackedStep{};
  Packer& packer = flush ? flush_packer_ : packer_;
  absl::StatusOr<PackedStep> packed = packer.Pack(buffer_, buffer_advantages_);
  if (!packed.ok()) {
    return Annotate(packed.status(), StrCat("micro-step queue, step ", pack_step_));
  }
  // What the packer held back (it would part-fill a micro-batch) waits for more arrivals.
  std::vector<Trajectory> held;
  std::vector<std::vector<float>> held_advantages;
  int64_t held_tokens = 0;
  for (int64_t i : packed->held_back) {
    held_tokens += buffer_[i].size();
    held.push_back(std::move(buffer_[i]));
    held_advantages.push_back(std::move(buffer_advantages_[i]));
  }
  buffer_ = std::move(held);
  buffer_advantages_ = std::move(held_advantages);
  buffered_tokens_ = held_tokens;
  return packed;
}

void MicroStepQueue::Publish(PackedStep packed) {
  for (PackedMicroBatch& mb : packed.micro_batches) {
    auto micro_step = std::make_shared<MicroStep>();
    micro_step->id = static_cast<int64_t>(slots_.size());
    micro_step->step = step_;
    micro_step->version = version_;
    micro_step->batch = std::move(mb);
    pending_.push_back(micro_step->id);
    slots_.push_back(Slot{std::move(micro_step)});
  }
  normaliser_ += packed.normaliser;
  report_.trainable_tokens += packed.trainable_tokens;
  report_.micro_steps = static_cast<int64_t>(slots_.size());
  if (!packed.micro_batches.empty()) changed_.SignalAll();
}

absl::Status MicroStepQueue::Close() {
  absl::MutexLock pack_lock(&pack_mu_);
  if (!accepting_) {
    return absl::FailedPreconditionError(
        pack_step_ < 0 ? std::string("micro-step queue: Close before any step began")
                       : StrCat("micro-step queue: step ", pack_step_, " is closed already"));
  }
  ASSIGN_OR_RETURN(PackedStep packed, PackBuffer(/*flush=*/true));
  accepting_ = false;
  absl::MutexLock lock(&mu_);
  Publish(std::move(packed));
  closed_ = true;
  report_.closed = true;
  report_.normaliser = normaliser_;
  MaybeComplete();
  changed_.SignalAll();
  return absl::OkStatus();
}

void MicroStepQueue::MaybeComplete() {
  if (cancelled_ || complete_ || !closed_ || !pending_.empty() ||
      done_ != static_cast<int64_t>(slots_.size())) {
    return;
  }
  complete_ = true;
  report_.complete = true;
  for (const Slot& slot : slots_) report_.ran_by[slot.cell].push_back(slot.micro_step->id);
  std::vector<int> cells;
  std::vector<int> missing_cores;
  for (int c = options_.core_cell; c < options_.core_cell + options_.core_cells; ++c) {
    (joined_.count(c) ? cells : missing_cores).push_back(c);
  }
  for (int cell : joined_) {
    if (!options_.IsCore(cell)) cells.push_back(cell);
  }
  participants_step_ = step_;
  if (!missing_cores.empty()) {
    participants_ = absl::FailedPreconditionError(
        StrCat("micro-step queue: step ", step_, " completed without the core cell(s) [",
               flywheel::Join(missing_cores, ","), "] (participants [", flywheel::Join(cells, ","),
               "]; they died or never joined): their optimiser shards cannot apply it"));
  } else {
    if (cells != epoch_cells_) {
      ++epoch_;
      epoch_cells_ = cells;
    }
    participants_ = StepParticipants{step_, epoch_, cells, normaliser_};
  }
  changed_.SignalAll();
}

absl::Status MicroStepQueue::Join(int cell, int64_t step) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return absl::CancelledError("micro-step queue: cancelled");
  if (cell < 0) return absl::InvalidArgumentError(StrCat("micro-step queue: cell ", cell, " < 0"));
  RETURN_IF_ERROR(CheckStep(step, StrCat("cell ", cell, " joining").c_str()));
  if (dead_.count(cell)) {
    return absl::AbortedError(
        StrCat("micro-step queue: cell ", cell, " was declared dead in step ", step_));
  }
  if (complete_) {
    return absl::FailedPreconditionError(StrCat("micro-step queue: cell ", cell, " joins step ",
                                                step_, " after it completed; join the next"));
  }
  joined_.insert(cell);
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const MicroStep>> MicroStepQueue::Claim(int cell,
                                                                       absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  const int64_t step = step_;
  auto check = [&]() -> absl::Status {
    if (cancelled_) return absl::CancelledError("micro-step queue: cancelled");
    if (dead_.count(cell)) {
      return absl::AbortedError(StrCat("micro-step queue: cell ", cell,
                                       " was declared dead in step ", step, "; its claims ended"));
    }
    if (!joined_.count(cell) && step_ == step) {
      return absl::FailedPreconditionError(
          StrCat("micro-step queue: cell ", cell, " claims in step ", step, " without Join"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check());
  // Core cells claim first: a satellite takes a micro-step only when more are pending than core
  // cells wait for (header comment).
  const bool core = options_.IsCore(cell);
  auto available = [&] {
    return static_cast<int64_t>(pending_.size()) > (core ? 0 : waiting_cores_);
  };
  if (core) ++waiting_cores_;
  while (!cancelled_ && !dead_.count(cell) && step_ == step && !complete_ && !available()) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) break;
  }
  if (core) {
    --waiting_cores_;
    if (!pending_.empty()) changed_.SignalAll();  // a waiting satellite may take one now
  }
  if (step_ != step) return std::shared_ptr<const MicroStep>();  // completed, next one began
  RETURN_IF_ERROR(check());
  if (complete_) return std::shared_ptr<const MicroStep>();
  if (!available()) {
    return absl::DeadlineExceededError(StrCat("micro-step queue: cell ", cell,
                                              " found no micro-step of step ", step,
                                              " by the deadline (", DebugStringLocked(), ")"));
  }
  const int64_t id = pending_.front();
  pending_.pop_front();
  slots_[id].cell = cell;
  ++report_.claims;
  return slots_[id].micro_step;
}

absl::Status MicroStepQueue::Done(int cell, int64_t id) {
  absl::MutexLock lock(&mu_);
  if (id < 0 || id >= static_cast<int64_t>(slots_.size())) {
    return absl::InvalidArgumentError(StrCat("micro-step queue: step ", step_,
                                             " has no micro-step ", id, " (it has ", slots_.size(),
                                             ")"));
  }
  if (dead_.count(cell)) {
    return absl::AbortedError(StrCat("micro-step queue: cell ", cell, " was declared dead in step ",
                                     step_, "; its micro-step ", id, " was re-queued"));
  }
  Slot& slot = slots_[id];
  if (slot.cell != cell) {
    return absl::FailedPreconditionError(
        StrCat("micro-step queue: micro-step ", id, " of step ", step_, " is ",
               slot.cell < 0 ? std::string("pending") : StrCat("claimed by cell ", slot.cell),
               ", not by cell ", cell));
  }
  if (slot.done) {
    return absl::FailedPreconditionError(
        StrCat("micro-step queue: micro-step ", id, " of step ", step_, " is done already"));
  }
  slot.done = true;
  ++done_;
  MaybeComplete();
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<int64_t> MicroStepQueue::Requeue(int cell) {
  absl::MutexLock lock(&mu_);
  if (step_ < 0) {
    return absl::FailedPreconditionError("micro-step queue: Requeue before any step began");
  }
  if (complete_) {
    return absl::FailedPreconditionError(
        StrCat("micro-step queue: cell ", cell, " died after step ", step_,
               " completed; the participants' reduce fails on its own (group timeout)"));
  }
  if (!dead_.insert(cell).second) return 0;
  joined_.erase(cell);
  std::vector<int64_t> ids;
  for (Slot& slot : slots_) {
    if (slot.cell != cell) continue;
    if (slot.done) --done_;
    slot.done = false;
    slot.cell = -1;
    ids.push_back(slot.micro_step->id);
  }
  // Back at the front, in id order: they are the oldest work of the step.
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) pending_.push_front(*it);
  report_.requeued += static_cast<int64_t>(ids.size());
  changed_.SignalAll();
  return static_cast<int64_t>(ids.size());
}

absl::StatusOr<int64_t> MicroStepQueue::Leave(int cell) {
  {
    absl::MutexLock lock(&mu_);
    bool claims = false;
    for (const Slot& slot : slots_) claims = claims || slot.cell == cell;
    if (!claims) {
      if (step_ < 0) {
        return absl::FailedPreconditionError("micro-step queue: Leave before any step began");
      }
      if (complete_ && joined_.count(cell)) {
        return absl::FailedPreconditionError(
            StrCat("micro-step queue: cell ", cell, " leaves step ", step_,
                   " after it completed with the cell as a participant: reduce it"));
      }
      joined_.erase(cell);
      changed_.SignalAll();
      return 0;
    }
  }
  return Requeue(cell);
}

absl::StatusOr<StepParticipants> MicroStepQueue::AwaitParticipants(int64_t step,
                                                                   absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (!cancelled_ && participants_step_ < step) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) break;
  }
  if (cancelled_ && participants_step_ != step) {
    return absl::CancelledError("micro-step queue: cancelled");
  }
  if (participants_step_ < step) {
    return absl::DeadlineExceededError(StrCat("micro-step queue: step ", step,
                                              " did not complete by the deadline (",
                                              DebugStringLocked(), ")"));
  }
  if (participants_step_ > step) {
    return absl::FailedPreconditionError(StrCat("micro-step queue: the participants of step ", step,
                                                " are gone (step ", participants_step_,
                                                " completed since)"));
  }
  return participants_;
}

absl::Status MicroStepQueue::AwaitDone(int64_t step, int64_t count, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto reached = [&] { return step_ > step || (step_ == step && (complete_ || done_ >= count)); };
  while (!cancelled_ && !reached()) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) break;
  }
  if (cancelled_) return absl::CancelledError("micro-step queue: cancelled");
  if (!reached()) {
    return absl::DeadlineExceededError(StrCat("micro-step queue: ", count, " micro-steps of step ",
                                              step, " were not done by the deadline (",
                                              DebugStringLocked(), ")"));
  }
  return absl::OkStatus();
}

absl::Status MicroStepQueue::AwaitJoined(int64_t step, int64_t count, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto reached = [&] {
    return step_ > step ||
           (step_ == step && (complete_ || static_cast<int64_t>(joined_.size()) >= count));
  };
  while (!cancelled_ && !reached()) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) break;
  }
  if (cancelled_) return absl::CancelledError("micro-step queue: cancelled");
  if (!reached()) {
    return absl::DeadlineExceededError(StrCat("micro-step queue: ", count,
                                              " cells did not join step ", step,
                                              " by the deadline (", DebugStringLocked(), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> MicroStepQueue::normaliser() const {
  absl::MutexLock lock(&mu_);
  if (!closed_) {
    return absl::FailedPreconditionError(
        StrCat("micro-step queue: the normaliser of step ", step_, " is known once it is closed"));
  }
  return normaliser_;
}

bool MicroStepQueue::complete() const {
  absl::MutexLock lock(&mu_);
  return complete_;
}

int64_t MicroStepQueue::waiting_core_claims() const {
  absl::MutexLock lock(&mu_);
  return waiting_cores_;
}

void MicroStepQueue::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  changed_.SignalAll();
}

StepReport MicroStepQueue::report() const {
  absl::MutexLock lock(&mu_);
  StepReport out = report_;
  out.normaliser = normaliser_;
  out.dead.assign(dead_.begin(), dead_.end());
  return out;
}

std::string MicroStepQueue::DebugString() const {
  absl::MutexLock lock(&mu_);
  return DebugStringLocked();
}

std::string MicroStepQueue::DebugStringLocked() const {
  return StrCat("step ", step_, ": ", slots_.size(), " micro-steps, ", pending_.size(),
                " pending, ", done_, " done, ", joined_.size(), " joined, ",
                closed_ ? "closed" : "open", complete_ ? ", complete" : "");
}

}  // namespace flywheel
