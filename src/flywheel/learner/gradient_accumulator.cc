#include "flywheel/learner/gradient_accumulator.h"

#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/learner/token_logprobs.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {

GradientAccumulator::GradientAccumulator(LossOptions options, PolicyForward policy,
                                         PolicyForward reference, double temperature,
                                         UtilisationTracker* tracker)
    : options_(options),
      policy_(std::move(policy)),
      reference_(std::move(reference)),
      temperature_(temperature),
      tracker_(tracker) {}

absl::StatusOr<MicroBatchLoss> GradientAccumulator::Accumulate(const PackedMicroBatch& mb) {
  torch::Tensor logits, targets;
  PolicyLossInputs in;
  {
    auto timer = tracker_->Time(Phase::kForward);
    absl::StatusOr<torch::Tensor> forward = absl::UnknownError("forward did not run");
    RETURN_IF_ERROR(TorchCall("forward", [&] { forward = policy_(mb); }));
    RETURN_IF_ERROR(Annotate(forward.status(), "forward"));
    logits = *std::move(forward);
    // The packer builds host tensors; the per-token data follows the logits to their device.
    RETURN_IF_ERROR(TorchCall("forward: log-probs", [&] {
      const torch::Device device = logits.device();
      targets = mb.targets.to(device);
      in.logprobs = TokenLogprobs(logits, targets, temperature_);
      if (options_.entropy_coef > 0) in.entropy = TokenEntropy(logits, temperature_);
      in.behaviour_logprobs = mb.behaviour_logprobs.to(device);
      in.advantages = mb.advantages.to(device);
      in.trainable = mb.trainable.to(device);
      in.loss_weights = mb.loss_weights.to(device);
    }));
    in.proximal_logprobs = in.logprobs.detach();  // see the header: weights at step start
    if (options_.kl_coef > 0) {
      if (!reference_) {
        return absl::FailedPreconditionError("learner.kl_coef > 0 needs a reference model");
      }
      torch::NoGradGuard no_grad;
      ASSIGN_OR_RETURN(torch::Tensor ref_logits, reference_(mb));
      RETURN_IF_ERROR(TorchCall("reference forward: log-probs", [&] {
        in.reference_logprobs =
            TokenLogprobs(ref_logits, targets.to(ref_logits.device()), temperature_)
                .to(targets.device());
      }));
    }
  }
  auto timer = tracker_->Time(Phase::kBackward);
  ASSIGN_OR_RETURN(LossOutput out, PolicyLoss(options_, in));
  RETURN_IF_ERROR(TorchCall("backward", [&] { out.loss.backward(); }));
  MicroBatchLoss result;
  result.loss = out.loss.item<double>();
  result.diagnostics = out.diagnostics;
  // Free this micro-batch's autograd graph while the backward phase is still timed: with
  // per-document attention it has thousands of nodes, and tearing them down (2-4 ms per micro-
  // batch on the bench's model) is part of the step's computation, not time the learner idles.
  out = LossOutput{};
  in = PolicyLossInputs{};
  logits = torch::Tensor();
  return result;
}

}  // namespace flywheel
