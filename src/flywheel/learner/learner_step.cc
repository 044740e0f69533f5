#include "flywheel/learner/learner_step.h"

#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/learner/advantages.h"
#include "flywheel/learner/token_logprobs.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {

nlohmann::json LearnerStepResult::ToJson() const {
  nlohmann::json lags = nlohmann::json::object();
  for (const auto& [lag, count] : staleness.lag_counts) lags[std::to_string(lag)] = count;
  return {{"step", optimizer.step},
          {"version", optimizer.version},
          {"lr", optimizer.lr},
          {"grad_norm", optimizer.grad_norm},
          {"loss", loss},
          {"policy_loss", diagnostics.policy_loss},
          {"kl", diagnostics.kl},
          {"entropy", diagnostics.entropy},
          {"trainable_tokens", diagnostics.tokens},
          {"mean_ratio", diagnostics.mean_ratio()},
          {"mean_is_weight", diagnostics.mean_is_weight()},
          {"clip_fraction", diagnostics.clip_fraction()},
          {"is_cap_fraction", diagnostics.is_cap_fraction()},
          {"kept", staleness.kept},
          {"dropped_stale", staleness.dropped},
          {"lags", lags},
          {"bucket", bucket},
          {"micro_batches", micro_batches},
          {"padding_waste", padding_waste},
          {"held_back", held_back},
          {"dropped_too_long", dropped_too_long},
          {"times", times.ToJson()}};
}

LearnerStep::LearnerStep(const LearnerOptions& options, int64_t run_max_steps,
                         std::vector<torch::Tensor> parameters, PolicyForward policy,
                         PolicyForward reference, double temperature, Clock* clock,
                         int64_t initial_version)
    : options_(options),
      loss_options_(LossOptions::FromLearnerOptions(options)),
      advantage_kind_(options.advantage),
      policy_(std::move(policy)),
      reference_(std::move(reference)),
      temperature_(temperature),
      staleness_(options.max_staleness),
      packer_(PackerOptions::FromLearnerOptions(options)),
      optimizer_(std::move(parameters),
                 OptimizerOptions::FromLearnerOptions(options, run_max_steps), initial_version),
      tracker_(clock) {}

absl::Status LearnerStep::AccumulateMicroBatch(const PackedMicroBatch& mb,
                                               LearnerStepResult& result) {
  torch::Tensor logits, targets;
  PolicyLossInputs in;
  {
    auto timer = tracker_.Time(Phase::kForward);
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
      torch::NoGradGuard no_grad;
      ASSIGN_OR_RETURN(torch::Tensor ref_logits, reference_(mb));
      RETURN_IF_ERROR(TorchCall("reference forward: log-probs", [&] {
        in.reference_logprobs =
            TokenLogprobs(ref_logits, targets.to(ref_logits.device()), temperature_)
                .to(targets.device());
      }));
    }
  }
  auto timer = tracker_.Time(Phase::kBackward);
  ASSIGN_OR_RETURN(LossOutput out, PolicyLoss(loss_options_, in));
  RETURN_IF_ERROR(TorchCall("backward", [&] { out.loss.backward(); }));
  result.loss += out.loss.item<double>();
  result.diagnostics.Merge(out.diagnostics);
  // Free this micro-batch's autograd graph while the backward phase is still timed: with
  // per-document attention it has thousands of nodes, and tearing them down (2-4 ms per micro-
  // batch on the bench's model) is part of the step's computation, not time the learner idles.
  out = LossOutput{};
  in = PolicyLossInputs{};
  logits = torch::Tensor();
  return absl::OkStatus();
}

absl::StatusOr<LearnerStepResult> LearnerStep::Step(std::vector<Trajectory> batch) {
  const std::string context = StrCat("learner step ", optimizer_.step());
  if (advantage_kind_ == AdvantageKind::kVtrace) {
    return absl::FailedPreconditionError(
        StrCat(context,
               ": learner.advantage = \"vtrace\" needs a value head, which this "
               "policy does not provide"));
  }
  if (options_.kl_coef > 0 && !reference_) {
    return absl::FailedPreconditionError(
        StrCat(context, ": learner.kl_coef > 0 needs a reference model"));
  }
  LearnerStepResult result;
  PackedStep packed;
  {
    auto timer = tracker_.Time(Phase::kOther);
    result.staleness = staleness_.Apply(optimizer_.version(), batch);
    ASSIGN_OR_RETURN(std::vector<std::vector<float>> advantages,
                     ComputeAdvantages(batch, AdvantageOptions::FromLearnerOptions(options_)));
    // Held trajectories go first; they too must still be within the staleness bound.
    std::vector<Trajectory> input;
    std::vector<std::vector<float>> input_advantages;
    for (size_t i = 0; i < held_.size(); ++i) {
      const int64_t lag = StalenessFilter::Lag(held_[i], optimizer_.version());
      if (options_.max_staleness >= 0 && lag > options_.max_staleness) {
        ++result.staleness.dropped;
        MetricsRegistry::Global().GetCounter("learner.dropped{reason=stale}")->Increment();
        continue;
      }
      input.push_back(std::move(held_[i]));
      input_advantages.push_back(std::move(held_advantages_[i]));
    }
    const int64_t carried = static_cast<int64_t>(input.size());
    held_.clear();
    held_advantages_.clear();
    for (size_t i = 0; i < batch.size(); ++i) {
      input.push_back(std::move(batch[i]));
      input_advantages.push_back(std::move(advantages[i]));
    }
    ASSIGN_OR_RETURN(packed, packer_.Pack(input, input_advantages, carried));
    for (int64_t i : packed.held_back) {
      held_.push_back(std::move(input[i]));
      held_advantages_.push_back(std::move(input_advantages[i]));
    }
  }
  result.bucket = packed.bucket;
  result.micro_batches = static_cast<int64_t>(packed.micro_batches.size());
  result.padding_waste = packed.padding_waste();
  result.held_back = static_cast<int64_t>(packed.held_back.size());
  result.dropped_too_long = static_cast<int64_t>(packed.dropped_too_long.size());
  if (packed.micro_batches.empty() || packed.trainable_tokens == 0) {
    tracker_.EndStep();
    return absl::UnavailableError(StrCat(
        context, ": nothing to train on after filtering (", result.staleness.dropped, " stale, ",
        result.dropped_too_long, " too long, ", result.held_back, " held for the next step)"));
  }

  optimizer_.ZeroGrad();
  for (const PackedMicroBatch& mb : packed.micro_batches) {
    const absl::Status s = AccumulateMicroBatch(mb, result);
    if (!s.ok()) {
      optimizer_.ZeroGrad();
      tracker_.EndStep();
      return Annotate(s, context);
    }
  }
  absl::StatusOr<OptimizerStepInfo> info;
  {
    auto timer = tracker_.Time(Phase::kOptimizer);
    info = optimizer_.Step();
  }
  result.times = tracker_.EndStep();
  if (!info.ok()) return Annotate(info.status(), context);
  result.optimizer = *info;
  return result;
}

}  // namespace flywheel
