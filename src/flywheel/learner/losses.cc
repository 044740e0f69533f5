#include "flywheel/learner/losses.h"

#include <vector>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace {

// x where trainable, 0 elsewhere (NaN log-probs of prompt tokens must not reach exp or grad).
torch::Tensor Masked(const torch::Tensor& x, const torch::Tensor& mask) {
  return torch::where(mask, x, torch::zeros_like(x));
}

absl::Status CheckShape(const char* name, const torch::Tensor& t, const torch::Tensor& like) {
  if (!t.defined()) return absl::InvalidArgumentError(StrCat("policy loss: ", name, " is missing"));
  if (!t.sizes().equals(like.sizes())) {
    return absl::InvalidArgumentError(StrCat("policy loss: ", name, " has shape ", t.sizes(),
                                             " but logprobs has ", like.sizes()));
  }
  return absl::OkStatus();
}

}  // namespace

void LossDiagnostics::Merge(const LossDiagnostics& o) {
  tokens += o.tokens;
  ratio_sum += o.ratio_sum;
  is_weight_sum += o.is_weight_sum;
  clipped += o.clipped;
  capped += o.capped;
  policy_loss += o.policy_loss;
  kl += o.kl;
  entropy += o.entropy;
}

std::string LossDiagnostics::DebugString() const {
  return fmt::format(
      "tokens={} policy_loss={:.6g} mean_ratio={:.4f} clip_fraction={:.4f} "
      "is_cap_fraction={:.4f} mean_is_weight={:.4f} kl={:.6g} entropy={:.6g}",
      tokens, policy_loss, mean_ratio(), clip_fraction(), is_cap_fraction(), mean_is_weight(), kl,
      entropy);
}

torch::Tensor TruncatedIsTerm(const torch::Tensor& logp, const torch::Tensor& behaviour_logp,
                              const torch::Tensor& advantages, double cap) {
  const torch::Tensor weight = (logp.detach() - behaviour_logp).exp().clamp_max(cap);
  return -weight * advantages * logp;
}

torch::Tensor PpoClipTerm(const torch::Tensor& logp, const torch::Tensor& behaviour_logp,
                          const torch::Tensor& advantages, double clip_eps) {
  const torch::Tensor ratio = (logp - behaviour_logp).exp();
  const torch::Tensor clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps);
  return -torch::min(ratio * advantages, clipped * advantages);
}

torch::Tensor DecoupledPpoTerm(const torch::Tensor& logp, const torch::Tensor& proximal_logp,
                               const torch::Tensor& behaviour_logp, const torch::Tensor& advantages,
                               double clip_eps, double cap) {
  const torch::Tensor behaviour_weight =
      (proximal_logp.detach() - behaviour_logp).exp().clamp_max(cap);
  return behaviour_weight * PpoClipTerm(logp, proximal_logp.detach(), advantages, clip_eps);
}

torch::Tensor PolicyTerm(const LossOptions& options, const torch::Tensor& logp,
                         const torch::Tensor& proximal_logp, const torch::Tensor& behaviour_logp,
                         const torch::Tensor& advantages) {
  switch (options.kind) {
    case PolicyLossKind::kTruncatedIs:
      return TruncatedIsTerm(logp, behaviour_logp, advantages, options.is_cap);
    case PolicyLossKind::kVtrace:  // advantages are V-trace's r + γ v_{s+1} − V(x_s)
      return TruncatedIsTerm(logp, behaviour_logp, advantages, options.rho_bar);
    case PolicyLossKind::kPpoClip:
      return PpoClipTerm(logp, behaviour_logp, advantages, options.clip_eps);
    case PolicyLossKind::kDecoupledPpo:
      return DecoupledPpoTerm(logp, proximal_logp, behaviour_logp, advantages, options.clip_eps,
                              options.is_cap);
  }
  return {};  // unreachable: every kind is handled
}

torch::Tensor K3KlTerm(const torch::Tensor& logp, const torch::Tensor& reference_logp) {
  const torch::Tensor log_ratio = reference_logp.detach() - logp;
  return log_ratio.exp() - log_ratio - 1.0;
}

absl::StatusOr<torch::Tensor> AggregationWeights(LossAggregation aggregation,
                                                 const torch::Tensor& trainable,
                                                 const torch::Tensor& sequence_ids,
                                                 const torch::Tensor& execution_ids) {
  const torch::Tensor& ids =
      aggregation == LossAggregation::kExecutionMean ? execution_ids : sequence_ids;
  if (aggregation != LossAggregation::kTokenMean) {
    RETURN_IF_ERROR(CheckShape(
        aggregation == LossAggregation::kExecutionMean ? "execution_ids" : "sequence_ids", ids,
        trainable));
  }
  return TorchCallOr("loss aggregation weights", [&]() -> torch::Tensor {
    torch::NoGradGuard no_grad;
    const torch::Tensor mask = trainable.to(torch::kBool);
    const torch::Tensor maskf = mask.to(torch::kFloat);
    if (aggregation == LossAggregation::kTokenMean) {
      return maskf / maskf.sum().clamp_min(1.0);
    }
    const torch::Tensor flat_ids = ids.to(torch::kLong).reshape({-1});
    const torch::Tensor trained_ids = flat_ids.masked_select(mask.reshape({-1}));
    if (trained_ids.numel() == 0) return torch::zeros_like(maskf);
    TORCH_CHECK(trained_ids.min().item<int64_t>() >= 0, "ids of trainable tokens must be >= 0");
    const torch::Tensor counts = torch::bincount(trained_ids).to(torch::kFloat);
    const torch::Tensor groups = (counts > 0).sum().to(torch::kFloat);
    const torch::Tensor per_token =
        counts.index_select(0, flat_ids.clamp(0, counts.size(0) - 1)).view(trainable.sizes());
    return torch::where(mask, 1.0 / (per_token.clamp_min(1.0) * groups), torch::zeros_like(maskf));
  });
}

absl::StatusOr<LossOutput> PolicyLoss(const LossOptions& options, const PolicyLossInputs& in) {
  if (!in.logprobs.defined()) return absl::InvalidArgumentError("policy loss: logprobs is missing");
  RETURN_IF_ERROR(CheckShape("behaviour_logprobs", in.behaviour_logprobs, in.logprobs));
  RETURN_IF_ERROR(CheckShape("advantages", in.advantages, in.logprobs));
  RETURN_IF_ERROR(CheckShape("trainable", in.trainable, in.logprobs));
  RETURN_IF_ERROR(CheckShape("loss_weights", in.loss_weights, in.logprobs));
  if (options.kind == PolicyLossKind::kDecoupledPpo) {
    RETURN_IF_ERROR(CheckShape("proximal_logprobs (needed by decoupled_ppo)", in.proximal_logprobs,
                               in.logprobs));
  }
  if (options.kl_coef > 0) {
    RETURN_IF_ERROR(CheckShape("reference_logprobs (needed by kl_coef > 0)", in.reference_logprobs,
                               in.logprobs));
  }
  if (options.entropy_coef > 0) {
    RETURN_IF_ERROR(CheckShape("entropy (needed by entropy_coef > 0)", in.entropy, in.logprobs));
  }

  return TorchCallOr("policy loss", [&] {
    const torch::Tensor mask = in.trainable.to(torch::kBool);
    const torch::Tensor w = Masked(in.loss_weights.detach(), mask);
    const torch::Tensor logp = Masked(in.logprobs, mask);
    const torch::Tensor mu = Masked(in.behaviour_logprobs.detach(), mask);
    const torch::Tensor adv = Masked(in.advantages.detach(), mask);
    torch::Tensor prox;
    if (options.kind == PolicyLossKind::kDecoupledPpo) {
      prox = Masked(in.proximal_logprobs.detach(), mask);
    }

    const torch::Tensor policy_loss = (w * PolicyTerm(options, logp, prox, mu, adv)).sum();
    torch::Tensor loss = policy_loss;
    torch::Tensor kl, entropy;
    if (options.kl_coef > 0) {
      kl = (w * K3KlTerm(logp, Masked(in.reference_logprobs.detach(), mask))).sum();
      loss = loss + options.kl_coef * kl;
    }
    if (options.entropy_coef > 0) {
      entropy = (w * Masked(in.entropy, mask)).sum();
      loss = loss - options.entropy_coef * entropy;
    }

    LossOutput out;
    out.loss = loss;
    torch::NoGradGuard no_grad;
    LossDiagnostics& d = out.diagnostics;
    const torch::Tensor lp = logp.detach();
    const torch::Tensor maskf = mask.to(torch::kFloat);
    d.tokens = mask.sum().item<int64_t>();
    // The ratio the loss clips and the behaviour importance weight before its cap.
    torch::Tensor ratio, is_weight, cap_hit, clip_hit;
    const double eps = options.clip_eps;
    switch (options.kind) {
      case PolicyLossKind::kTruncatedIs:
      case PolicyLossKind::kVtrace:
        ratio = is_weight = (lp - mu).exp();
        cap_hit = is_weight >
                  (options.kind == PolicyLossKind::kVtrace ? options.rho_bar : options.is_cap);
        clip_hit = torch::zeros_like(mask);
        break;
      case PolicyLossKind::kPpoClip:
        ratio = is_weight = (lp - mu).exp();
        cap_hit = torch::zeros_like(mask);
        clip_hit = ((adv > 0) & (ratio > 1 + eps)) | ((adv < 0) & (ratio < 1 - eps));
        break;
      case PolicyLossKind::kDecoupledPpo:
        ratio = (lp - prox).exp();
        is_weight = (prox - mu).exp();
        cap_hit = is_weight > options.is_cap;
        clip_hit = ((adv > 0) & (ratio > 1 + eps)) | ((adv < 0) & (ratio < 1 - eps));
        break;
    }
    d.ratio_sum = (ratio * maskf).sum().item<double>();
    d.is_weight_sum = (is_weight * maskf).sum().item<double>();
    d.clipped = (clip_hit & mask).sum().item<int64_t>();
    d.capped = (cap_hit & mask).sum().item<int64_t>();
    d.policy_loss = policy_loss.item<double>();
    if (kl.defined()) d.kl = kl.item<double>();
    if (entropy.defined()) d.entropy = entropy.item<double>();
    return out;
  });
}

absl::StatusOr<torch::Tensor> ValueLoss(const torch::Tensor& values, const torch::Tensor& targets,
                                        const torch::Tensor& weights) {
  RETURN_IF_ERROR(CheckShape("value targets", targets, values));
  RETURN_IF_ERROR(CheckShape("value loss weights", weights, values));
  return TorchCallOr("value loss", [&] {
    return 0.5 * (weights.detach() * (values - targets.detach()).pow(2)).sum();
  });
}

}  // namespace flywheel
