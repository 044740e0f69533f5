#include "flywheel/model/sampling.h"

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

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

// The plain C++ row version is the same distribution as the LibTorch one: same truncation set
// (−inf in the same places) and log-probs within float rounding, for every kind of parameters,
// wide and narrow logits, a vocabulary that is not a multiple of the vector width.
TEST(SamplingTest, RowVersionEqualsTheTensorVersion) {
  torch::manual_seed(3);
  for (const int64_t vocab : {7, 64, 515}) {
    for (const double spread : {0.3, 3.0, 30.0}) {
      const auto logits = (torch::randn({6, vocab}) * spread).contiguous();
      for (const auto& [temperature, top_k, top_p] :
           std::vector<std::tuple<double, int64_t, double>>{
               {1.0, 0, 1.0}, {0.7, 0, 1.0}, {1.3, 5, 1.0}, {1.0, 0, 0.9}, {0.8, 40, 0.95},
               {1.0, 1, 1.0}, {2.0, 0, 0.3}}) {
        SamplingParams p;
        p.temperature = temperature;
        p.top_k = top_k;
        p.top_p = top_p;
        const auto expected = SamplingLogProbs(logits, p).contiguous();
        std::vector<float> got(vocab);
        for (int64_t r = 0; r < logits.size(0); ++r) {
          SamplingLogProbsRow(logits[r].data_ptr<float>(), vocab, p, got.data());
          const float* want = expected[r].data_ptr<float>();
          for (int64_t i = 0; i < vocab; ++i) {
            if (std::isinf(want[i])) {
              EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0)
                  << "vocab " << vocab << " row " << r << " token " << i;
            } else {
              EXPECT_NEAR(got[i], want[i], 2e-5 * std::max(1.0f, std::abs(want[i])))
                  << "vocab " << vocab << " spread " << spread << " T " << temperature
                  << " top_k " << top_k << " top_p " << top_p << " token " << i;
            }
          }
        }
      }
    }
  }
}

TEST(SamplingTest, SampleRowIsSeededAndReturnsTheDrawnTokensLogprob) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 0.5f, 1.5f};
  SamplingParams p;
  p.top_k = 3;
  std::mt19937_64 a(9), b(9);
  std::vector<float> lp(5), probs(5);
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 2000; ++i) {
    const int64_t t = SampleRow(logits.data(), 5, p, a, lp.data(), probs.data());
    EXPECT_EQ(t, SampleRow(logits.data(), 5, p, b, lp.data(), probs.data()));
    EXPECT_TRUE(std::isfinite(lp[t]));
    ++counts[t];
  }
  EXPECT_EQ(counts[0] + counts[2], 0);  // outside the top 3
}

TEST(SamplingTest, BatchedSamplingDrawsWhatSampleRowDrawsFromTheSameGenerators) {
  // Rows of mixed sampling parameters (grouped inside), several draws each: every row consumes
  // its own generator exactly as SampleRow does, so tokens and log-probs match the row path.
  const int64_t rows = 12, vocab = 300;
  torch::manual_seed(4);
  const torch::Tensor logits = torch::randn({rows, vocab}) * 3;
  SamplingParams plain, hot, nucleus, greedy;
  hot.temperature = 1.7;
  hot.top_k = 20;
  nucleus.top_p = 0.8;
  greedy.top_k = 1;
  std::vector<const SamplingParams*> params;
  std::vector<std::mt19937_64> batched, single;
  for (int64_t b = 0; b < rows; ++b) {
    const SamplingParams* choices[] = {&plain, &hot, &nucleus, &greedy};
    params.push_back(choices[b % 4]);
    batched.emplace_back(100 + b);
    single.emplace_back(100 + b);
  }
  std::vector<std::mt19937_64*> rngs;
  for (auto& g : batched) rngs.push_back(&g);
  int64_t same = 0, draws = 0;
  std::vector<float> lp(vocab), probs(vocab);
  for (int round = 0; round < 50; ++round) {
    const SampledRows got = SampleRows(logits, params, rngs);
    ASSERT_EQ(got.tokens.size(), static_cast<size_t>(rows));
    for (int64_t b = 0; b < rows; ++b) {
      const torch::Tensor row = logits[b].contiguous();
      const int64_t want =
          SampleRow(row.data_ptr<float>(), vocab, *params[b], single[b], lp.data(), probs.data());
      ++draws;
      if (got.tokens[b] != want) continue;  // only at a boundary, within float rounding
      ++same;
      EXPECT_NEAR(got.logprobs[b], lp[want], 1e-4) << "row " << b;
    }
    for (int64_t b = 3; b < rows; b += 4) EXPECT_EQ(got.tokens[b], logits[b].argmax().item<int64_t>());
  }
  EXPECT_GE(same, draws - 2) << same << " of " << draws << " draws agree";
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
