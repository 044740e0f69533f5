#include "flywheel/learner/losses.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

namespace flywheel {
namespace {

using ::testing::HasSubstr;

torch::Tensor T(std::vector<double> v) { return torch::tensor(v, torch::kDouble); }
torch::Tensor Mask(std::vector<int> v) {
  std::vector<uint8_t> b(v.begin(), v.end());
  return torch::tensor(std::vector<int64_t>(v.begin(), v.end())).to(torch::kBool);
}
torch::Tensor Leaf(std::vector<double> v) { return T(std::move(v)).requires_grad_(true); }

// Token-mean weights for an all-trainable vector of n tokens.
torch::Tensor Uniform(int64_t n) { return torch::full({n}, 1.0 / n, torch::kDouble); }

PolicyLossInputs Inputs(torch::Tensor logp, torch::Tensor mu, torch::Tensor adv) {
  const int64_t n = logp.numel();
  PolicyLossInputs in;
  in.logprobs = logp;
  in.behaviour_logprobs = mu;
  in.advantages = adv;
  in.trainable = torch::ones({n}, torch::kBool);
  in.loss_weights = Uniform(n);
  return in;
}

// PPO-clip with μ as the old policy; ε = 0.2, so the trust region is r ∈ [0.8, 1.2].
// Hand values of −min(r·A, clip(r)·A):
//   A = +1: r = 0.7 → −0.7 (unclipped side), 1.0 → −1, 1.3 → −1.2 (clipped)
//   A = −1: r = 0.7 → +0.8 (clipped), 1.3 → +1.3 (unclipped side)
// and just inside each boundary (1.2 − δ, 0.8 + δ) the token is still unclipped.
TEST(LossesTest, PpoClipHandValuesAndBoundaries) {
  const double d = 1e-9;
  const std::vector<double> r = {0.7, 1.0, 1.2 - d, 1.3, 0.7, 0.8 + d, 1.3};
  const std::vector<double> a = {1, 1, 1, 1, -1, -1, -1};
  const std::vector<double> expected = {-0.7, -1.0, -(1.2 - d), -1.2, 0.8, 0.8 + d, 1.3};
  // d loss / d log π = −r·A where unclipped, 0 where clipped.
  const std::vector<double> expected_grad = {-0.7, -1.0, -(1.2 - d), 0.0, 0.0, 0.8 + d, 1.3};
  std::vector<double> logp, mu;
  for (double x : r) {
    mu.push_back(std::log(0.25));
    logp.push_back(std::log(0.25) + std::log(x));
  }
  torch::Tensor lp = Leaf(logp);
  LossOptions options;
  options.kind = PolicyLossKind::kPpoClip;
  options.clip_eps = 0.2;
  auto out = PolicyLoss(options, Inputs(lp, T(mu), T(a)));
  ASSERT_TRUE(out.ok()) << out.status();
  double mean = 0;
  for (double e : expected) mean += e / expected.size();
  EXPECT_NEAR(out->loss.item<double>(), mean, 1e-12);

  const torch::Tensor terms = PpoClipTerm(T(logp), T(mu), T(a), 0.2);
  for (size_t i = 0; i < r.size(); ++i) EXPECT_NEAR(terms[i].item<double>(), expected[i], 1e-12);

  out->loss.backward();
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_NEAR(lp.grad()[i].item<double>(), expected_grad[i] / r.size(), 1e-12) << i;
  }
  // Clipped (zero gradient): (A > 0, r = 1.3) and (A < 0, r = 0.7), not the inside tokens.
  EXPECT_EQ(out->diagnostics.clipped, 2);
  EXPECT_NEAR(out->diagnostics.clip_fraction(), 2.0 / 7, 1e-12);
  double ratio_mean = 0;
  for (double x : r) ratio_mean += x / r.size();
  EXPECT_NEAR(out->diagnostics.mean_ratio(), ratio_mean, 1e-12);
  EXPECT_EQ(out->diagnostics.capped, 0);

  // Just past each boundary the clip takes over: the value is the clipped one, the gradient 0.
  torch::Tensor past = Leaf({std::log(1.2 + 1e-6), std::log(0.8 - 1e-6)});
  const torch::Tensor past_terms = PpoClipTerm(past, T({0, 0}), T({1, -1}), 0.2);
  EXPECT_NEAR(past_terms[0].item<double>(), -1.2, 1e-12);
  EXPECT_NEAR(past_terms[1].item<double>(), 0.8, 1e-12);
  past_terms.sum().backward();
  EXPECT_EQ(past.grad()[0].item<double>(), 0.0);
  EXPECT_EQ(past.grad()[1].item<double>(), 0.0);
}

// Truncated IS: −min(π/μ, c)·A·log π with the weight detached; c = 2.
TEST(LossesTest, TruncatedIsCapsTheWeight) {
  const double lp0 = std::log(0.3), mu0 = std::log(0.1);  // π/μ = 3 → capped to 2
  const double lp1 = std::log(0.2), mu1 = std::log(0.4);  // π/μ = 0.5
  const double lp2 = std::log(0.4), mu2 = std::log(0.2);  // π/μ = 2, exactly the cap
  torch::Tensor lp = Leaf({lp0, lp1, lp2});
  LossOptions options;
  options.kind = PolicyLossKind::kTruncatedIs;
  options.is_cap = 2.0;
  auto out = PolicyLoss(options, Inputs(lp, T({mu0, mu1, mu2}), T({1.5, -2.0, 1.0})));
  ASSERT_TRUE(out.ok()) << out.status();
  const double l0 = -2.0 * 1.5 * lp0, l1 = -0.5 * -2.0 * lp1, l2 = -2.0 * 1.0 * lp2;
  EXPECT_NEAR(out->loss.item<double>(), (l0 + l1 + l2) / 3, 1e-12);
  out->loss.backward();
  // The weight is a constant: d/d log π = −min(w, c)·A.
  EXPECT_NEAR(lp.grad()[0].item<double>(), -2.0 * 1.5 / 3, 1e-12);
  EXPECT_NEAR(lp.grad()[1].item<double>(), -0.5 * -2.0 / 3, 1e-12);
  EXPECT_NEAR(lp.grad()[2].item<double>(), -2.0 * 1.0 / 3, 1e-12);
  EXPECT_EQ(out->diagnostics.capped, 1);  // 3 > 2; 2 is not above the cap
  EXPECT_NEAR(out->diagnostics.is_cap_fraction(), 1.0 / 3, 1e-12);
  EXPECT_NEAR(out->diagnostics.mean_is_weight(), (3.0 + 0.5 + 2.0) / 3, 1e-12);
  EXPECT_EQ(out->diagnostics.clipped, 0);
}

// Decoupled PPO: −min(π_prox/μ, cap) · min(r·A, clip(r)·A), r = π/π_prox.
TEST(LossesTest, DecoupledPpoHandValues) {
  // token 0: π_prox/μ = 4 → capped at 2; r = 1.1 (inside), A = 1 → −2·1.1
  // token 1: π_prox/μ = 0.5; r = 1.5, A = 1 → clipped at 1.2 → −0.5·1.2
  // token 2: π_prox/μ = 1; r = 0.5, A = −2 → min(−1, −1.6) = −1.6 → +1.6
  const std::vector<double> mu = {std::log(0.1), std::log(0.4), std::log(0.5)};
  const std::vector<double> prox = {std::log(0.4), std::log(0.2), std::log(0.5)};
  const std::vector<double> r = {1.1, 1.5, 0.5};
  const std::vector<double> a = {1, 1, -2};
  std::vector<double> logp;
  for (int i = 0; i < 3; ++i) logp.push_back(prox[i] + std::log(r[i]));
  const std::vector<double> expected = {-2 * 1.1, -0.5 * 1.2, 1.6};
  const std::vector<double> expected_grad = {-2 * 1.1 * 1, 0, 0};  // −w·r·A where unclipped
  torch::Tensor lp = Leaf(logp);
  PolicyLossInputs in = Inputs(lp, T(mu), T(a));
  in.proximal_logprobs = T(prox);
  LossOptions options;
  options.kind = PolicyLossKind::kDecoupledPpo;
  options.clip_eps = 0.2;
  options.is_cap = 2.0;
  auto out = PolicyLoss(options, in);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NEAR(out->loss.item<double>(), (expected[0] + expected[1] + expected[2]) / 3, 1e-12);
  out->loss.backward();
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(lp.grad()[i].item<double>(), expected_grad[i] / 3, 1e-12) << i;
  }
  EXPECT_EQ(out->diagnostics.clipped, 2);  // tokens 1 and 2
  EXPECT_EQ(out->diagnostics.capped, 1);   // token 0
  EXPECT_NEAR(out->diagnostics.mean_ratio(), (1.1 + 1.5 + 0.5) / 3, 1e-12);
  EXPECT_NEAR(out->diagnostics.mean_is_weight(), (4.0 + 0.5 + 1.0) / 3, 1e-12);

  in.proximal_logprobs = torch::Tensor();
  EXPECT_THAT(PolicyLoss(options, in).status().message(), HasSubstr("proximal_logprobs"));
}

TEST(LossesTest, OnPolicyBatchGivesRatioOneAndMinusMeanAdvantage) {
  torch::manual_seed(7);
  const int64_t n = 64;
  const torch::Tensor logp = torch::log_softmax(torch::randn({n, 5}), 1).select(1, 0);
  const torch::Tensor adv = torch::randn({n});
  const double mean_adv = adv.mean().item<double>();
  for (PolicyLossKind kind :
       {PolicyLossKind::kPpoClip, PolicyLossKind::kDecoupledPpo, PolicyLossKind::kTruncatedIs}) {
    torch::Tensor lp = logp.clone().requires_grad_(true);
    PolicyLossInputs in;
    in.logprobs = lp;
    in.behaviour_logprobs = logp.clone();
    in.proximal_logprobs = logp.clone();
    in.advantages = adv;
    in.trainable = torch::ones({n}, torch::kBool);
    in.loss_weights = torch::full({n}, 1.0f / n);
    LossOptions options;
    options.kind = kind;
    auto out = PolicyLoss(options, in);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_NEAR(out->diagnostics.mean_ratio(), 1.0, 1e-6);
    EXPECT_EQ(out->diagnostics.clipped, 0);
    EXPECT_EQ(out->diagnostics.capped, 0);
    out->loss.backward();
    // Every on-policy loss has the REINFORCE gradient −A / n per token.
    EXPECT_TRUE(torch::allclose(lp.grad(), -adv / n, 1e-6, 1e-7));
    if (kind != PolicyLossKind::kTruncatedIs) {
      EXPECT_NEAR(out->loss.item<double>(), -mean_adv, 1e-6);
    }
  }
}

TEST(LossesTest, K3KlAndEntropyBonus) {
  const std::vector<double> logp = {std::log(0.5), std::log(0.2), std::log(0.3)};
  const std::vector<double> ref = {std::log(0.25), std::log(0.2), std::log(0.6)};
  // k3 = x − log x − 1 with x = π_ref / π: 0.5 − ln 0.5 − 1, 0, 2 − ln 2 − 1
  const double k0 = 0.5 - std::log(0.5) - 1, k2 = 2 - std::log(2.0) - 1;
  const torch::Tensor k3 = K3KlTerm(T(logp), T(ref));
  EXPECT_NEAR(k3[0].item<double>(), k0, 1e-12);
  EXPECT_NEAR(k3[1].item<double>(), 0.0, 1e-12);
  EXPECT_NEAR(k3[2].item<double>(), k2, 1e-12);

  PolicyLossInputs in = Inputs(Leaf(logp), T(logp), T({0, 0, 0}));  // zero advantage
  in.reference_logprobs = T(ref);
  in.entropy = Leaf({1.0, 2.0, 3.0});
  LossOptions options;
  options.kind = PolicyLossKind::kPpoClip;
  options.kl_coef = 0.1;
  options.entropy_coef = 0.01;
  auto out = PolicyLoss(options, in);
  ASSERT_TRUE(out.ok()) << out.status();
  const double kl = (k0 + 0 + k2) / 3, entropy = 2.0;
  EXPECT_NEAR(out->diagnostics.kl, kl, 1e-12);
  EXPECT_NEAR(out->diagnostics.entropy, entropy, 1e-12);
  EXPECT_NEAR(out->loss.item<double>(), 0.1 * kl - 0.01 * entropy, 1e-12);
  out->loss.backward();
  // d/dH of −coef·mean(H) = −coef / n
  EXPECT_NEAR(in.entropy.grad()[0].item<double>(), -0.01 / 3, 1e-12);
}

TEST(LossesTest, AggregationWeightsByTokenSequenceAndExecution) {
  // seq 0: 3 trainable (exec 0); seq 1: 1 trainable (exec 0); seq 2: 2 trainable (exec 1).
  const torch::Tensor trainable = Mask({1, 1, 1, 0, 0, 1, 0, 1, 1});
  const torch::Tensor seq = torch::tensor(std::vector<int64_t>{0, 0, 0, 0, 1, 1, 2, 2, 2});
  const torch::Tensor exec = torch::tensor(std::vector<int64_t>{0, 0, 0, 0, 0, 0, 1, 1, 1});
  auto check = [&](LossAggregation agg, std::vector<double> expected) {
    auto w = AggregationWeights(agg, trainable, seq, exec);
    ASSERT_TRUE(w.ok()) << w.status();
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR((*w)[i].item<double>(), expected[i], 1e-7) << static_cast<int>(agg) << " " << i;
    }
  };
  const double s = 1.0 / 6;
  check(LossAggregation::kTokenMean, {s, s, s, 0, 0, s, 0, s, s});
  // mean over 3 sequences of per-sequence means
  check(LossAggregation::kSequenceMean,
        {1.0 / 9, 1.0 / 9, 1.0 / 9, 0, 0, 1.0 / 3, 0, 1.0 / 6, 1.0 / 6});
  // exec 0 pools 4 tokens, exec 1 has 2; mean over the 2 executions
  check(LossAggregation::kExecutionMean,
        {1.0 / 8, 1.0 / 8, 1.0 / 8, 0, 0, 1.0 / 8, 0, 1.0 / 4, 1.0 / 4});
}

TEST(LossesTest, NonTrainableNaNsDoNotLeak) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  torch::Tensor lp = Leaf({std::log(0.5), std::log(0.5), std::log(0.25)});
  PolicyLossInputs in = Inputs(lp, T({nan, std::log(0.5), nan}), T({nan, 1.0, 3.0}));
  in.trainable = Mask({0, 1, 0});
  in.loss_weights = T({0, 1, 0});
  in.proximal_logprobs = T({nan, std::log(0.5), nan});
  for (PolicyLossKind kind :
       {PolicyLossKind::kPpoClip, PolicyLossKind::kDecoupledPpo, PolicyLossKind::kTruncatedIs}) {
    LossOptions options;
    options.kind = kind;
    auto out = PolicyLoss(options, in);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_NEAR(out->loss.item<double>(),
                -1.0 * (kind == PolicyLossKind::kTruncatedIs ? std::log(0.5) : 1.0), 1e-12);
    lp.mutable_grad() = torch::Tensor();
    out->loss.backward();
    EXPECT_TRUE(torch::isfinite(lp.grad()).all().item<bool>());
    EXPECT_EQ(lp.grad()[0].item<double>(), 0.0);
    EXPECT_EQ(out->diagnostics.tokens, 1);
  }
}

TEST(LossesTest, ValueLoss) {
  torch::Tensor v = Leaf({1.0, 2.0});
  auto loss = ValueLoss(v, T({0.0, 4.0}), T({0.5, 0.5}));
  ASSERT_TRUE(loss.ok());
  EXPECT_NEAR(loss->item<double>(), 0.5 * (0.5 * 1 + 0.5 * 4), 1e-12);
  EXPECT_FALSE(ValueLoss(v, T({1.0}), T({1.0, 1.0})).ok());
}

TEST(LossesTest, DiagnosticsMerge) {
  LossDiagnostics a, b;
  a.tokens = 2;
  a.ratio_sum = 2.2;
  a.clipped = 1;
  b.tokens = 2;
  b.ratio_sum = 1.8;
  b.capped = 1;
  a.Merge(b);
  EXPECT_NEAR(a.mean_ratio(), 1.0, 1e-12);
  EXPECT_NEAR(a.clip_fraction(), 0.25, 1e-12);
  EXPECT_NEAR(a.is_cap_fraction(), 0.25, 1e-12);
  EXPECT_THAT(a.DebugString(), HasSubstr("clip_fraction=0.25"));
}

}  // namespace
}  // namespace flywheel
