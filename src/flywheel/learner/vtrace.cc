#include "flywheel/learner/vtrace.h"

#include <vector>

#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {

absl::StatusOr<VtraceOutput> VtraceTargets(const torch::Tensor& log_rhos,
                                           const torch::Tensor& discounts,
                                           const torch::Tensor& rewards,
                                           const torch::Tensor& values,
                                           const torch::Tensor& bootstrap_value,
                                           const VtraceOptions& options) {
  if (log_rhos.dim() < 1) return absl::InvalidArgumentError("vtrace: log_rhos needs a time dim");
  for (const auto* t : {&discounts, &rewards, &values}) {
    if (!t->sizes().equals(log_rhos.sizes())) {
      return absl::InvalidArgumentError(
          StrCat("vtrace: log_rhos, discounts, rewards and values must share one shape; got ",
                 log_rhos.sizes(), " and ", t->sizes()));
    }
  }
  if (!bootstrap_value.sizes().equals(log_rhos.sizes().slice(0, log_rhos.dim() - 1))) {
    return absl::InvalidArgumentError(
        StrCat("vtrace: bootstrap_value must have the leading shape of values ", log_rhos.sizes(),
               " without its time dim; got ", bootstrap_value.sizes()));
  }
  return TorchCallOr("vtrace", [&] {
    torch::NoGradGuard no_grad;
    const int64_t T = log_rhos.size(-1);
    const torch::Tensor ratio = log_rhos.detach().exp();
    const torch::Tensor rho = ratio.clamp_max(options.rho_bar);
    const torch::Tensor c = options.lambda * ratio.clamp_max(options.c_bar);
    const torch::Tensor v = values.detach();
    // V(x_{t+1}), with the bootstrap value after the last step.
    const torch::Tensor next_values =
        torch::cat({v.narrow(-1, 1, T - 1), bootstrap_value.detach().unsqueeze(-1)}, -1);
    const torch::Tensor deltas = rho * (rewards + discounts * next_values - v);

    std::vector<torch::Tensor> diffs(T);  // v_s − V(x_s)
    torch::Tensor acc = torch::zeros_like(bootstrap_value);
    for (int64_t s = T - 1; s >= 0; --s) {
      acc = deltas.select(-1, s) + discounts.select(-1, s) * c.select(-1, s) * acc;
      diffs[s] = acc;
    }
    VtraceOutput out;
    out.vs = torch::stack(diffs, -1) + v;
    const torch::Tensor next_vs =
        torch::cat({out.vs.narrow(-1, 1, T - 1), bootstrap_value.detach().unsqueeze(-1)}, -1);
    out.pg_advantages = rewards + discounts * next_vs - v;
    return out;
  });
}

}  // namespace flywheel
