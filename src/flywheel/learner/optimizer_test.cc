#include "flywheel/learner/optimizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "flywheel/learner/lr_schedule.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

TEST(LrScheduleTest, WarmupThenCosineToTheFloor) {
  const LrSchedule s{/*lr=*/1.0, /*warmup_steps=*/4, /*total_steps=*/12, /*min_lr_ratio=*/0.1};
  EXPECT_DOUBLE_EQ(s.At(0), 0.25);
  EXPECT_DOUBLE_EQ(s.At(1), 0.5);
  EXPECT_DOUBLE_EQ(s.At(3), 1.0);
  EXPECT_DOUBLE_EQ(s.At(4), 1.0);                // cosine starts at the peak
  EXPECT_NEAR(s.At(8), 0.1 + 0.9 * 0.5, 1e-12);  // half way: cos(π/2) = 0
  EXPECT_NEAR(s.At(6), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4)), 1e-12);
  EXPECT_NEAR(s.At(12), 0.1, 1e-12);
  EXPECT_NEAR(s.At(1000), 0.1, 1e-12);  // stays at the floor
  for (int64_t k = 4; k < 12; ++k) EXPECT_GT(s.At(k), s.At(k + 1));
  const LrSchedule flat{0.5, 0, 10, 1.0};
  EXPECT_DOUBLE_EQ(flat.At(0), 0.5);
  EXPECT_DOUBLE_EQ(flat.At(7), 0.5);
}

OptimizerOptions Plain(double lr, double clip = 0.0, double wd = 0.0) {
  OptimizerOptions o;
  o.schedule = {lr, 0, 100, 1.0};
  o.grad_clip = clip;
  o.weight_decay = wd;
  return o;
}

TEST(OptimizerTest, FirstAdamWStepMatchesTheFormula) {
  // Step 1 of AdamW: m̂ = g, v̂ = g², so p ← p·(1 − lr·wd) − lr·g / (|g| + eps).
  torch::Tensor p = torch::tensor({1.0, -2.0, 0.5}, torch::kDouble).requires_grad_(true);
  const std::vector<double> g = {0.3, -4.0, 1e-3};
  p.mutable_grad() = torch::tensor(g, torch::kDouble);
  const double lr = 0.01, wd = 0.1, eps = 1e-8;
  Optimizer opt({p}, Plain(lr, 0.0, wd));
  auto info = opt.Step();
  ASSERT_TRUE(info.ok()) << info.status();
  const std::vector<double> p0 = {1.0, -2.0, 0.5};
  for (int i = 0; i < 3; ++i) {
    const double expected = p0[i] * (1 - lr * wd) - lr * g[i] / (std::abs(g[i]) + eps);
    EXPECT_NEAR(p[i].item<double>(), expected, 1e-12) << i;
  }
  EXPECT_EQ(info->step, 1);
  EXPECT_EQ(info->version, 1);
  EXPECT_DOUBLE_EQ(info->lr, lr);
}

TEST(OptimizerTest, OneVersionPerStepFromTheInitialVersion) {
  torch::nn::Linear model(2, 1);
  Optimizer opt(model->parameters(), Plain(1e-3), /*initial_version=*/40);
  for (int k = 1; k <= 3; ++k) {
    opt.ZeroGrad();
    model->forward(torch::ones({4, 2})).sum().backward();
    auto info = opt.Step();
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->step, k);
    EXPECT_EQ(info->version, 40 + k);
  }
  EXPECT_EQ(opt.version(), 43);
}

TEST(OptimizerTest, ClipsTheGlobalGradientNorm) {
  torch::Tensor a = torch::zeros({1}, torch::kDouble).requires_grad_(true);
  torch::Tensor b = torch::zeros({1}, torch::kDouble).requires_grad_(true);
  a.mutable_grad() = torch::tensor({3.0}, torch::kDouble);
  b.mutable_grad() = torch::tensor({4.0}, torch::kDouble);  // global norm 5
  Optimizer opt({a, b}, Plain(1e-3, /*clip=*/1.0));
  auto info = opt.Step();
  ASSERT_TRUE(info.ok());
  EXPECT_DOUBLE_EQ(info->grad_norm, 5.0);
  EXPECT_TRUE(info->clipped);
  EXPECT_NEAR(a.grad().item<double>(), 0.6, 1e-6);
  EXPECT_NEAR(b.grad().item<double>(), 0.8, 1e-6);
  // Below the threshold nothing is scaled.
  a.mutable_grad() = torch::tensor({0.3}, torch::kDouble);
  b.mutable_grad() = torch::tensor({0.4}, torch::kDouble);
  info = opt.Step();
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->clipped);
  EXPECT_DOUBLE_EQ(a.grad().item<double>(), 0.3);
}

TEST(OptimizerTest, WarmupRatesAreApplied) {
  OptimizerOptions o = Plain(1.0);
  o.schedule = {1.0, 2, 4, 0.0};
  torch::Tensor p = torch::zeros({1}).requires_grad_(true);
  Optimizer opt({p}, o);
  std::vector<double> lrs;
  for (int k = 0; k < 5; ++k) {
    p.mutable_grad() = torch::ones({1});
    auto info = opt.Step();
    ASSERT_TRUE(info.ok());
    lrs.push_back(info->lr);
  }
  EXPECT_THAT(lrs, ::testing::ElementsAre(0.5, 1.0, 1.0, 0.5, 0.0));
}

TEST(OptimizerTest, NonFiniteGradientSkipsTheStep) {
  torch::Tensor p = torch::ones({2}).requires_grad_(true);
  p.mutable_grad() = torch::tensor({1.0f, std::numeric_limits<float>::quiet_NaN()});
  Optimizer opt({p}, Plain(0.1, 1.0));
  auto info = opt.Step();
  ASSERT_FALSE(info.ok());
  EXPECT_THAT(info.status().message(), HasSubstr("optimiser step 0"));
  EXPECT_THAT(info.status().message(), HasSubstr("skipped"));
  EXPECT_TRUE(torch::equal(p, torch::ones({2})));
  EXPECT_EQ(opt.version(), 0);
  EXPECT_EQ(p.grad().abs().sum().item<float>(), 0.0f);
}

TEST(OptimizerTest, TheSquareSumReducerMakesTheClipGlobal) {
  // This optimiser holds a slice of the gradient (norm 3); the other slices add 16 to Σ g².
  torch::Tensor a = torch::zeros({1}, torch::kDouble).requires_grad_(true);
  a.mutable_grad() = torch::tensor({3.0}, torch::kDouble);
  Optimizer opt({a}, Plain(1e-3, /*clip=*/1.0));
  opt.SetSquareSumReducer([](double local) -> absl::StatusOr<double> { return local + 16.0; });
  auto info = opt.Step();
  ASSERT_TRUE(info.ok());
  EXPECT_DOUBLE_EQ(info->grad_norm, 5.0);
  EXPECT_NEAR(a.grad().item<double>(), 0.6, 1e-6);
  opt.SetSquareSumReducer(
      [](double) -> absl::StatusOr<double> { return absl::DeadlineExceededError("peer gone"); });
  a.mutable_grad() = torch::tensor({3.0}, torch::kDouble);
  info = opt.Step();
  ASSERT_FALSE(info.ok());
  EXPECT_THAT(info.status().message(), HasSubstr("peer gone"));
  EXPECT_EQ(opt.version(), 1);
}

TEST(OptimizerTest, MomentsCopiedIntoAFreshOptimiserContinueIdentically) {
  auto make = [] { return torch::tensor({1.0f, -2.0f, 0.5f}).requires_grad_(true); };
  torch::Tensor p = make(), q = make();
  Optimizer a({p}, Plain(0.01)), b({q}, Plain(0.01));
  EXPECT_EQ(a.MomentsOf(p).step, 0);
  EXPECT_EQ(a.StateBytes(p), 0);
  p.mutable_grad() = torch::tensor({0.3f, -1.0f, 0.2f});
  ASSERT_TRUE(a.Step().ok());
  EXPECT_EQ(a.StateBytes(p), 2 * 3 * 4);
  {
    torch::NoGradGuard no_grad;
    q.copy_(p);
  }
  b.SetMoments(q, a.MomentsOf(p));
  b.RestoreCounters(a.step(), a.version());
  for (torch::Tensor* t : {&p, &q}) t->mutable_grad() = torch::tensor({-0.1f, 0.4f, 2.0f});
  ASSERT_TRUE(a.Step().ok());
  ASSERT_TRUE(b.Step().ok());
  EXPECT_TRUE(torch::equal(p, q));
  EXPECT_EQ(b.version(), 2);
}

TEST(OptimizerTest, FromLearnerOptionsResolvesTheHorizon) {
  LearnerOptions l;
  l.total_steps = 0;
  EXPECT_EQ(OptimizerOptions::FromLearnerOptions(l, 250).schedule.total_steps, 250);
  l.total_steps = 90;
  EXPECT_EQ(OptimizerOptions::FromLearnerOptions(l, 250).schedule.total_steps, 90);
}

}  // namespace
}  // namespace flywheel
