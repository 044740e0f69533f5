#include "flywheel/learner/vtrace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace flywheel {
namespace {

using ::testing::HasSubstr;

// The V-trace target written as IMPALA's eq. (1), a direct double sum over t ≥ s with the
// product of traces — not the backward recursion the implementation uses.
std::vector<double> DirectVs(const std::vector<double>& log_rho, const std::vector<double>& gamma,
                             const std::vector<double>& r, const std::vector<double>& v,
                             double bootstrap, double rho_bar, double c_bar, double lambda) {
  const size_t T = r.size();
  auto V = [&](size_t t) { return t < T ? v[t] : bootstrap; };
  std::vector<double> vs(T);
  for (size_t s = 0; s < T; ++s) {
    double sum = 0;
    for (size_t t = s; t < T; ++t) {
      double weight = 1;  // Π_{i=s}^{t−1} γ_i c_i
      for (size_t i = s; i < t; ++i) {
        weight *= gamma[i] * lambda * std::min(c_bar, std::exp(log_rho[i]));
      }
      const double rho = std::min(rho_bar, std::exp(log_rho[t]));
      sum += weight * rho * (r[t] + gamma[t] * V(t + 1) - v[t]);
    }
    vs[s] = v[s] + sum;
  }
  return vs;
}

TEST(VtraceTest, MatchesTheDirectSumFormula) {
  torch::manual_seed(3);
  const int64_t B = 3, T = 6;
  const torch::Tensor log_rhos = torch::randn({B, T}, torch::kDouble);
  torch::Tensor discounts = torch::full({B, T}, 0.9, torch::kDouble);
  discounts.index_put_({1, 2}, 0.0);  // an episode boundary inside sequence 1
  const torch::Tensor rewards = torch::randn({B, T}, torch::kDouble);
  const torch::Tensor values = torch::randn({B, T}, torch::kDouble);
  const torch::Tensor bootstrap = torch::randn({B}, torch::kDouble);
  const VtraceOptions options{/*rho_bar=*/1.0, /*c_bar=*/0.9, /*lambda=*/0.95};
  auto out = VtraceTargets(log_rhos, discounts, rewards, values, bootstrap, options);
  ASSERT_TRUE(out.ok()) << out.status();

  auto row = [](const torch::Tensor& t, int64_t b) {
    std::vector<double> v(t.size(1));
    for (int64_t i = 0; i < t.size(1); ++i) v[i] = t[b][i].item<double>();
    return v;
  };
  for (int64_t b = 0; b < B; ++b) {
    const auto vs =
        DirectVs(row(log_rhos, b), row(discounts, b), row(rewards, b), row(values, b),
                 bootstrap[b].item<double>(), options.rho_bar, options.c_bar, options.lambda);
    for (int64_t s = 0; s < T; ++s) {
      EXPECT_NEAR(out->vs[b][s].item<double>(), vs[s], 1e-10) << "b=" << b << " s=" << s;
      const double next = s + 1 < T ? vs[s + 1] : bootstrap[b].item<double>();
      const double pg = rewards[b][s].item<double>() + discounts[b][s].item<double>() * next -
                        values[b][s].item<double>();
      EXPECT_NEAR(out->pg_advantages[b][s].item<double>(), pg, 1e-10);
    }
  }
}

TEST(VtraceTest, OnPolicyWithUnitTracesIsTheDiscountedReturn) {
  // π = μ, λ = c̄ = ρ̄ = 1: v_s is the n-step bootstrapped return regardless of V.
  const torch::Tensor zeros = torch::zeros({1, 3});
  const torch::Tensor rewards = torch::tensor({{1.0f, 2.0f, 3.0f}}).view({1, 3});
  const torch::Tensor values = torch::tensor({{10.0f, -4.0f, 7.0f}}).view({1, 3});
  const torch::Tensor discounts = torch::full({1, 3}, 0.5f);
  const torch::Tensor bootstrap = torch::tensor({8.0f});
  auto out = VtraceTargets(zeros, discounts, rewards, values, bootstrap, VtraceOptions{});
  ASSERT_TRUE(out.ok());
  // v_2 = 3 + 0.5·8 = 7; v_1 = 2 + 0.5·7 = 5.5; v_0 = 1 + 0.5·5.5 = 3.75
  EXPECT_NEAR(out->vs[0][2].item<float>(), 7.0f, 1e-5);
  EXPECT_NEAR(out->vs[0][1].item<float>(), 5.5f, 1e-5);
  EXPECT_NEAR(out->vs[0][0].item<float>(), 3.75f, 1e-5);
}

TEST(VtraceTest, RejectsMismatchedShapes) {
  const torch::Tensor a = torch::zeros({2, 3});
  auto out = VtraceTargets(a, a, torch::zeros({2, 4}), a, torch::zeros({2}), VtraceOptions{});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("share one shape"));
  out = VtraceTargets(a, a, a, a, torch::zeros({3}), VtraceOptions{});
  EXPECT_THAT(out.status().message(), HasSubstr("bootstrap_value"));
}

}  // namespace
}  // namespace flywheel
