#include "flywheel/model/sampling.h"

#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace flywheel {
namespace {

TEST(SamplingTest, PlainIsTemperatureLogSoftmax) {
  const auto logits = torch::tensor({{1.0f, 2.0f, 3.0f, 0.5f}});
  SamplingParams p;
  p.temperature = 0.7;
  EXPECT_TRUE(torch::allclose(SamplingLogProbs(logits, p), torch::log_softmax(logits / 0.7, -1)));
}

TEST(SamplingTest, TopKKeepsTheKMostLikelyRenormalised) {
  const auto logits = torch::tensor({{1.0f, 4.0f, 3.0f, 0.5f}});
  SamplingParams p;
  p.top_k = 2;
  const auto lp = SamplingLogProbs(logits, p)[0];
  EXPECT_TRUE(std::isinf(lp[0].item<float>()));
  EXPECT_TRUE(std::isinf(lp[3].item<float>()));
  const double expected = 4.0 - std::log(std::exp(4.0) + std::exp(3.0));
  EXPECT_NEAR(lp[1].item<float>(), expected, 1e-6);
}

TEST(SamplingTest, TopPKeepsSmallestSetReachingTheMass) {
  // probabilities 0.5, 0.3, 0.15, 0.05
  const auto logits = torch::log(torch::tensor({{0.15f, 0.5f, 0.05f, 0.3f}}));
  SamplingParams p;
  p.top_p = 0.8;  // 0.5 + 0.3 reaches 0.8: keep two
  auto lp = SamplingLogProbs(logits, p)[0];
  EXPECT_NEAR(lp[1].item<float>(), std::log(0.5 / 0.8), 1e-5);
  EXPECT_NEAR(lp[3].item<float>(), std::log(0.3 / 0.8), 1e-5);
  EXPECT_TRUE(std::isinf(lp[0].item<float>()));
  p.top_p = 0.81;  // needs the third
  lp = SamplingLogProbs(logits, p)[0];
  EXPECT_NEAR(lp[0].item<float>(), std::log(0.15 / 0.95), 1e-5);
  p.top_p = 0.1;  // the most likely token is always kept
  lp = SamplingLogProbs(logits, p)[0];
  EXPECT_NEAR(lp[1].item<float>(), 0.0, 1e-6);
}

TEST(SamplingTest, TokenLogprobsGathersTheTargets) {
  const auto logits = torch::randn({2, 3, 11});
  const auto targets = torch::randint(11, {2, 3}, torch::kInt64);
  SamplingParams p;
  p.temperature = 1.3;
  const auto lp = TokenLogprobs(logits, targets, p);
  ASSERT_EQ(lp.sizes(), targets.sizes());
  EXPECT_NEAR(
      lp[1][2].item<float>(),
      torch::log_softmax(logits[1][2] / 1.3, -1)[targets[1][2].item<int64_t>()].item<float>(),
      1e-6);
}

TEST(SamplingTest, DrawIsSeededAndFollowsTheDistribution) {
  const auto lp = torch::tensor({0.1f, 0.0f, 0.6f, 0.3f}).contiguous();  // probabilities
  std::mt19937_64 a(42), b(42);
  std::vector<int> counts(4, 0);
  for (int i = 0; i < 20000; ++i) {
    const int64_t t = DrawToken(lp.data_ptr<float>(), 4, a);
    EXPECT_EQ(t, DrawToken(lp.data_ptr<float>(), 4, b));  // same seed, same tokens
    ++counts[t];
  }
  EXPECT_EQ(counts[1], 0);  // zero probability: never drawn
  EXPECT_NEAR(counts[2] / 20000.0, 0.6, 0.02);
  EXPECT_NEAR(counts[0] / 20000.0, 0.1, 0.02);
}

TEST(SamplingTest, ValidateNamesTheKey) {
  SamplingParams p;
  p.temperature = 0;
  EXPECT_THAT(std::string(p.Validate().message()), ::testing::HasSubstr("sampling.temperature"));
  p = {};
  p.top_p = 1.5;
  EXPECT_FALSE(p.Validate().ok());
}

}  // namespace
}  // namespace flywheel
