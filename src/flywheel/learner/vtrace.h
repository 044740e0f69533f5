// V-trace targets (Espeholt et al. 2018, IMPALA, eq. 1 and its recursive form) for an optional
// value head. Time runs along the last dimension; leading dimensions are independent sequences.
//
//   ρ_t = min(ρ̄, π/μ)    c_t = λ · min(c̄, π/μ)    δ_t = ρ_t (r_t + γ_t V(x_{t+1}) − V(x_t))
//   v_s = V(x_s) + Σ_{t≥s} (Π_{i=s}^{t−1} γ_i c_i) δ_t
//       computed backwards as  v_s − V(x_s) = δ_s + γ_s c_s (v_{s+1} − V(x_{s+1}))
//   policy-gradient advantage  A_s = r_s + γ_s v_{s+1} − V(x_s)   (v_T = bootstrap value)
//
// γ_t is a per-step discount (0 where an episode ends) so that sequences need no special case.
// Everything here is a target: no gradient flows through it.
#ifndef FLYWHEEL_LEARNER_VTRACE_H_
#define FLYWHEEL_LEARNER_VTRACE_H_

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "flywheel/learner/learner_options.h"

namespace flywheel {

struct VtraceOptions {
  double rho_bar = 1.0;
  double c_bar = 1.0;
  double lambda = 1.0;

  static VtraceOptions FromLearnerOptions(const LearnerOptions& o) {
    return {o.vtrace_rho_bar, o.vtrace_c_bar, o.vtrace_lambda};
  }
};

struct VtraceOutput {
  torch::Tensor vs;             // value targets v_s, shape of `values`
  torch::Tensor pg_advantages;  // r_s + γ_s v_{s+1} − V(x_s); the loss applies ρ_s
};

// log_rhos = log π − log μ, discounts γ_t, rewards r_t and values V(x_t) share one shape
// [..., T]; bootstrap_value V(x_T) has shape [...]. Float tensors on one device.
absl::StatusOr<VtraceOutput> VtraceTargets(const torch::Tensor& log_rhos,
                                           const torch::Tensor& discounts,
                                           const torch::Tensor& rewards,
                                           const torch::Tensor& values,
                                           const torch::Tensor& bootstrap_value,
                                           const VtraceOptions& options);

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_VTRACE_H_
