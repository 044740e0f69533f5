#include "flywheel/env/latency/latency_env.h"

#include "flywheel/core/status_macros.h"
#include "flywheel/env/task_source.h"

namespace flywheel {

LatencyEnv::LatencyEnv(std::unique_ptr<Environment> inner,
                       std::shared_ptr<const LatencyModelFactory> step_latency,
                       std::shared_ptr<const LatencyModelFactory> tool_latency, Clock* wait_clock)
    : inner_(std::move(inner)),
      step_factory_(std::move(step_latency)),
      tool_factory_(std::move(tool_latency)),
      wait_clock_(wait_clock) {}

absl::StatusOr<StepResult> LatencyEnv::Reset(const TaskInstance& task) {
  // Rollouts of one group get different latencies; the same rollout gets the same ones.
  const uint64_t seed = MixSeed(task.seed ^ MixSeed(task.rollout + 1));
  step_model_ = step_factory_->NewModel(seed);
  tool_model_ =
      tool_factory_ && tool_factory_->enabled() ? tool_factory_->NewModel(~seed) : nullptr;
  ASSIGN_OR_RETURN(StepResult r, inner_->Reset(task));
  AddLatency(r);
  return r;
}

absl::StatusOr<StepResult> LatencyEnv::Step(std::string_view action) {
  if (step_model_ == nullptr) return absl::FailedPreconditionError("step before reset");
  ASSIGN_OR_RETURN(StepResult r, inner_->Step(action));
  AddLatency(r);
  return r;
}

void LatencyEnv::AddLatency(StepResult& result) {
  LatencyModel* model = !result.tool.empty() && tool_model_ ? tool_model_.get() : step_model_.get();
  const absl::Duration d = model->Sample();
  if (wait_clock_ != nullptr) {
    wait_clock_->SleepFor(d);
  } else {
    result.latency += d;
  }
}

std::string LatencyEnv::DebugString() const {
  return StrCat(inner_->DebugString(), " + latency ", step_factory_->DebugString(),
                tool_factory_ && tool_factory_->enabled()
                    ? StrCat(", tool latency ", tool_factory_->DebugString())
                    : "");
}

}  // namespace flywheel
