#include "flywheel/env/observation_limit.h"

#include "flywheel/core/metrics.h"
#include "flywheel/core/status_macros.h"

namespace flywheel {

bool TruncateObservation(StepResult& result, size_t limit) {
  if (result.observation.size() <= limit) return false;
  size_t cut = limit;
  // Do not split a UTF-8 sequence: back off over continuation bytes.
  while (cut > 0 && (static_cast<unsigned char>(result.observation[cut]) & 0xC0) == 0x80) --cut;
  result.observation.resize(cut);
  result.truncated = true;
  static Counter* const truncated =
      MetricsRegistry::Global().GetCounter(
          "env.observation_truncated", "observations cut to env.max_observation_bytes");
  truncated->Increment();
  return true;
}

absl::StatusOr<StepResult> ObservationLimitEnv::Reset(const TaskInstance& task) {
  ASSIGN_OR_RETURN(StepResult r, inner_->Reset(task));
  TruncateObservation(r, limit_);
  return r;
}

absl::StatusOr<StepResult> ObservationLimitEnv::Step(std::string_view action) {
  ASSIGN_OR_RETURN(StepResult r, inner_->Step(action));
  TruncateObservation(r, limit_);
  return r;
}

}  // namespace flywheel
