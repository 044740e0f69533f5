#include "flywheel/runtime/harness_actors.h"

#include "absl/time/clock.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/trajectory/execution_record.h"

namespace flywheel {
namespace {

// How long an insert waits on a full buffer before it rechecks whether to stop.
constexpr absl::Duration kPoll = absl::Milliseconds(200);

}  // namespace

absl::StatusOr<std::unique_ptr<HarnessActors>> HarnessActors::Start(
    const HarnessActorsOptions& options, std::shared_ptr<const WeightSnapshot> snapshot,
    Buffer* buffer) {
  if (options.num_actors < 1 || options.executions_per_instance < 1) {
    return absl::InvalidArgumentError(
        "harness actors: num_actors and executions_per_instance must be >= 1");
  }
  std::unique_ptr<HarnessActors> actors(new HarnessActors(options, buffer));
  for (int64_t i = 0; i < options.num_actors; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<RolloutEngine> engine,
                     RolloutEngine::Create(options.engine, snapshot));
    actors->engines_.push_back(std::move(engine));
  }
  {
    absl::MutexLock lock(&actors->mu_);
    actors->errors_.assign(actors->engines_.size(), absl::OkStatus());
  }
  HarnessActors* self = actors.get();
  for (size_t i = 0; i < self->engines_.size(); ++i) {
    self->threads_.emplace_back([self, i] {
      absl::Status status = self->Loop(i);
      if (self->stopping_.load()) return;  // an insert cancelled by the closing buffer
      absl::MutexLock lock(&self->mu_);
      self->errors_[i] = std::move(status);
    });
  }
  return actors;
}

absl::Status HarnessActors::Loop(size_t index) {
  EngineHarnessPolicyOptions po = options_.policy;
  po.seed += static_cast<uint64_t>(index) << 32;  // distinct samples per thread
  EngineHarnessPolicy policy(engines_[index].get(), po);
  const std::string actor_id = StrCat("harness-actor-", index);
  while (AdmitInstance()) {
    const int64_t instance = next_instance_.fetch_add(1);
    const uint64_t seed = options_.instance_seed + static_cast<uint64_t>(instance);
    for (int64_t k = 0; k < options_.executions_per_instance; ++k) {
      // A group is whole or abandoned: once stopping, the rest of it is not played.
      if (stopping_.load()) return absl::CancelledError("stopping");
      absl::StatusOr<Trajectory> t;
      absl::StatusOr<Execution> e =
          RunRepairHarness(options_.harness, seed, policy, StrCat("repair-", seed, "-", k));
      if (e.ok()) t = ExecutionToTrajectory(*e, actor_id);
      if (!t.ok()) {
        return Annotate(e.ok() ? t.status() : e.status(),
                        StrCat(actor_id, ", repair instance ", seed));
      }
      RETURN_IF_ERROR(Insert(std::make_shared<const Trajectory>(*std::move(t))));
      executions_.fetch_add(1);
    }
    absl::MutexLock lock(&admission_mu_);
    --in_flight_;
  }
  return absl::OkStatus();
}

bool HarnessActors::AdmitInstance() {
  absl::MutexLock lock(&admission_mu_);
  while (!stopping_.load()) {
    if (options_.max_instances_ahead <= 0) {
      ++in_flight_;
      return true;
    }
    const BufferInfo info = buffer_->Info();
    if (in_flight_ + info.table.size + info.pending_groups < options_.max_instances_ahead) {
      ++in_flight_;
      return true;
    }
    // Woken when the learner takes groups; the timeout rechecks the stop.
    admission_cv_.WaitWithTimeout(&admission_mu_, kPoll);
  }
  return false;
}

void HarnessActors::Wake() {
  absl::MutexLock lock(&admission_mu_);
  admission_cv_.SignalAll();
}

absl::Status HarnessActors::Insert(std::shared_ptr<const Trajectory> trajectory) {
  while (true) {
    if (stopping_.load()) return absl::CancelledError("stopping");
    absl::Status status = buffer_->Insert(trajectory, absl::Now() + kPoll);
    if (!absl::IsDeadlineExceeded(status)) return status;  // backpressure: try again
  }
}

void HarnessActors::Publish(const std::shared_ptr<const WeightSnapshot>& snapshot) {
  for (const auto& engine : engines_) engine->PublishSnapshot(snapshot);
}

absl::Status HarnessActors::FirstError() {
  absl::MutexLock lock(&mu_);
  for (const absl::Status& s : errors_) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

void HarnessActors::Stop() {
  stopping_.store(true);
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

}  // namespace flywheel
