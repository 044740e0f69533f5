// Adds latency to any environment, so tasks stay pure and latency is a deployment choice.
//
// Each step's latency is drawn from the step model, or from the tool model when the step called
// a tool (StepResult::tool) and a tool model is configured. Two ways to serve it:
//   wait_clock == nullptr: the latency is added to StepResult::latency and EnvExecutor's timer
//                          queue waits it without holding a thread (training);
//   wait_clock != nullptr: Reset/Step wait it themselves on that clock, e.g. a VirtualClock that
//                          just advances (simulator, tests).
#ifndef FLYWHEEL_ENV_LATENCY_LATENCY_ENV_H_
#define FLYWHEEL_ENV_LATENCY_LATENCY_ENV_H_

#include <memory>

#include "flywheel/core/clock.h"
#include "flywheel/env/interface.h"
#include "flywheel/env/latency/latency_model.h"

namespace flywheel {

class LatencyEnv : public Environment {
 public:
  LatencyEnv(std::unique_ptr<Environment> inner,
             std::shared_ptr<const LatencyModelFactory> step_latency,
             std::shared_ptr<const LatencyModelFactory> tool_latency, Clock* wait_clock = nullptr);

  absl::StatusOr<StepResult> Reset(const TaskInstance& task) override;
  absl::StatusOr<StepResult> Step(std::string_view action) override;
  absl::StatusOr<double> ScorePartial() override { return inner_->ScorePartial(); }
  void Close() override { inner_->Close(); }
  void AwaitResources(absl::AnyInvocable<void(absl::Status)> ready) override {
    inner_->AwaitResources(std::move(ready));
  }
  void CancelAwait() override { inner_->CancelAwait(); }
  const VocabularySpec& vocabulary() const override { return inner_->vocabulary(); }
  std::string DebugString() const override;

 private:
  void AddLatency(StepResult& result);

  std::unique_ptr<Environment> inner_;
  std::shared_ptr<const LatencyModelFactory> step_factory_, tool_factory_;
  Clock* const wait_clock_;
  std::unique_ptr<LatencyModel> step_model_, tool_model_;  // per episode
};

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_LATENCY_LATENCY_ENV_H_
