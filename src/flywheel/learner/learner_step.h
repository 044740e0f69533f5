// One learner optimiser step over a batch of trajectories, model-agnostic: the model enters as a
// function from a packed micro-batch to logits. It composes the staleness filter, advantages,
// the packer (with carry-over), the loss with gradient accumulation over micro-batches, the
// optimiser, and utilisation accounting:
//
//   batch ─▶ StalenessFilter ─▶ ComputeAdvantages ─▶ Packer ─▶ for each micro-batch:
//            logits = policy(mb); log π = TokenLogprobs(logits, targets, T); loss.backward()
//        ─▶ Optimizer::Step (version + 1) ─▶ StepResult (diagnostics, lags, waste, times)
//
// The proximal policy of decoupled PPO is "the weights at the start of the step". One optimiser
// step is taken per batch, so those are exactly the weights of this forward pass: log π_prox is
// the detached log π of the same forward, and no second forward pass is needed.
//
// Not thread-safe: the learner thread owns it. Waiting for data happens outside; report it with
// tracker().Add(Phase::kWaitData, …) before Step.
#ifndef FLYWHEEL_LEARNER_LEARNER_STEP_H_
#define FLYWHEEL_LEARNER_LEARNER_STEP_H_

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/clock.h"
#include "flywheel/core/trajectory.h"
#include "flywheel/learner/learner_options.h"
#include "flywheel/learner/losses.h"
#include "flywheel/learner/optimizer.h"
#include "flywheel/learner/packer.h"
#include "flywheel/learner/staleness.h"
#include "flywheel/learner/utilisation.h"

namespace flywheel {

// Logits [rows, L, V] of a packed micro-batch (the model applies PackedLayout(doc_lengths, L)).
// The micro-batch's tensors are on the host; the model moves what it reads to its device, and the
// learner moves the per-token loss inputs to the logits' device.
using PolicyForward = std::function<absl::StatusOr<torch::Tensor>(const PackedMicroBatch&)>;

struct LearnerStepResult {
  OptimizerStepInfo optimizer;
  LossDiagnostics diagnostics;
  StalenessReport staleness;
  double loss = 0;  // Σ of the micro-batch losses = the aggregated step loss
  int64_t bucket = 0;
  int64_t micro_batches = 0;
  double padding_waste = 0;
  int64_t held_back = 0;  // trajectories carried to the next step
  int64_t dropped_too_long = 0;
  PhaseTimes times;

  nlohmann::json ToJson() const;
};

class LearnerStep {
 public:
  // `reference` computes the frozen reference model's logits; needed only when kl_coef > 0.
  // `temperature` is the actors' sampling temperature (log π must be evaluated under it).
  LearnerStep(const LearnerOptions& options, int64_t run_max_steps,
              std::vector<torch::Tensor> parameters, PolicyForward policy,
              PolicyForward reference = nullptr, double temperature = 1.0,
              Clock* clock = RealClock(), int64_t initial_version = 0);

  // Trains on `batch`. An empty batch after filtering takes no optimiser step and is an
  // error (kUnavailable) so the caller fetches more data.
  absl::StatusOr<LearnerStepResult> Step(std::vector<Trajectory> batch);

  Optimizer& optimizer() { return optimizer_; }
  UtilisationTracker& tracker() { return tracker_; }
  int64_t version() const { return optimizer_.version(); }

 private:
  absl::Status AccumulateMicroBatch(const PackedMicroBatch& mb, LearnerStepResult& result);

  LearnerOptions options_;
  LossOptions loss_options_;
  AdvantageKind advantage_kind_;
  PolicyForward policy_;
  PolicyForward reference_;
  double temperature_;
  StalenessFilter staleness_;
  Packer packer_;
  Optimizer optimizer_;
  UtilisationTracker tracker_;
  // Carried over from the previous step (carry_over), with their advantages.
  std::vector<Trajectory> held_;
  std::vector<std::vector<float>> held_advantages_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_LEARNER_STEP_H_
