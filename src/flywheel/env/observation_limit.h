// Caps observation size for any environment: a longer observation is cut to the limit (on a
// UTF-8 boundary), marked truncated and counted in env.observation_truncated, so one runaway
// output cannot blow up a trajectory. Process environments apply the same cut themselves, with
// their command in the log line.
#ifndef FLYWHEEL_ENV_OBSERVATION_LIMIT_H_
#define FLYWHEEL_ENV_OBSERVATION_LIMIT_H_

#include <cstddef>
#include <memory>

#include "flywheel/env/interface.h"

namespace flywheel {

// Cuts `result.observation` to at most `limit` bytes; returns true (and counts) if it did.
bool TruncateObservation(StepResult& result, size_t limit);

class ObservationLimitEnv : public Environment {
 public:
  ObservationLimitEnv(std::unique_ptr<Environment> inner, size_t limit)
      : inner_(std::move(inner)), limit_(limit) {}

  absl::StatusOr<StepResult> Reset(const TaskInstance& task) override;
  absl::StatusOr<StepResult> Step(std::string_view action) override;
  absl::StatusOr<double> ScorePartial() override { return inner_->ScorePartial(); }
  void Close() override { inner_->Close(); }
  void AwaitResources(absl::AnyInvocable<void(absl::Status)> ready) override {
    inner_->AwaitResources(std::move(ready));
  }
  void CancelAwait() override { inner_->CancelAwait(); }
  const VocabularySpec& vocabulary() const override { return inner_->vocabulary(); }
  std::string DebugString() const override { return inner_->DebugString(); }

 private:
  std::unique_ptr<Environment> inner_;
  const size_t limit_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_OBSERVATION_LIMIT_H_
