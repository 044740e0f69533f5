// Forward, loss and backward of one packed micro-batch, adding its gradient to the parameters'
// .grad (gradient accumulation). The one piece of per-micro-batch code every learner path runs:
// LearnerStep (one process, data parallel, sharded, tensor parallel) and the per-cell
// StreamingLearner (streaming_learner.h).
//
//   mb ─▶ logits = policy(mb) ─▶ log π = TokenLogprobs(logits, targets, T) ─▶ PolicyLoss
//      ─▶ loss.backward()  (.grad += ∂ Σ_t w_t ℓ_t / ∂θ)  ─▶ MicroBatchLoss (value, diagnostics)
//
// w_t are the micro-batch's loss_weights as the packer made them: normalised over the whole
// step (Σ over the step's micro-batches is the step's loss), or un-normalised weights u_t whose
// step normaliser D is applied to the summed gradient afterwards (PackerOptions::
// normalise_weights = false). The accumulator does not care which.
//
// The proximal policy of decoupled PPO is "the weights at the start of the step"; one optimiser
// step is taken per step, so those are the weights of this forward pass: log π_prox is the
// detached log π of the same forward.
//
// Not thread-safe: the thread that owns the learner calls it.
#ifndef FLYWHEEL_LEARNER_GRADIENT_ACCUMULATOR_H_
#define FLYWHEEL_LEARNER_GRADIENT_ACCUMULATOR_H_

#include <functional>

#include "absl/status/statusor.h"
#include "flywheel/learner/losses.h"
#include "flywheel/learner/packer.h"
#include "flywheel/learner/utilisation.h"

namespace flywheel {

// Logits [rows, L, V] of a packed micro-batch (the model applies PackedLayout(doc_lengths, L)).
// The micro-batch's tensors are on the host; the model moves what it reads to its device, and the
// learner moves the per-token loss inputs to the logits' device.
using PolicyForward = std::function<absl::StatusOr<torch::Tensor>(const PackedMicroBatch&)>;

// What one micro-batch added to the step: Σ_t w_t ℓ_t and the summable diagnostics.
struct MicroBatchLoss {
  double loss = 0;
  LossDiagnostics diagnostics;
};

class GradientAccumulator {
 public:
  // `reference` is read only when options.kl_coef > 0; `tracker` (borrowed, must outlive this)
  // receives the forward and backward times.
  GradientAccumulator(LossOptions options, PolicyForward policy, PolicyForward reference,
                      double temperature, UtilisationTracker* tracker);

  // Adds the micro-batch's gradient to .grad. On an error the gradients may hold part of a
  // backward: the caller discards the step's gradients.
  absl::StatusOr<MicroBatchLoss> Accumulate(const PackedMicroBatch& mb);

  const LossOptions& options() const { return options_; }
  bool has_reference() const { return static_cast<bool>(reference_); }
  void set_reference(PolicyForward reference) { reference_ = std::move(reference); }

 private:
  LossOptions options_;
  PolicyForward policy_;
  PolicyForward reference_;
  double temperature_;
  UtilisationTracker* tracker_;  // borrowed
};

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_GRADIENT_ACCUMULATOR_H_
