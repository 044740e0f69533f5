#include "flywheel/learner/learner_step.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "flywheel/learner/token_logprobs.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kVocab = 6;
constexpr int32_t kGoodToken = 3;

// A bigram policy: the logits at position i are a row of a table indexed by token i. It has no
// attention, so it needs no packed mask, and the learner machinery around it is what is tested.
struct BigramPolicy {
  torch::nn::Embedding table{kVocab, kVocab};

  PolicyForward Forward() {
    return [this](const PackedMicroBatch& mb) -> absl::StatusOr<torch::Tensor> {
      return table->forward(mb.tokens);
    };
  }

  // Samples `n` tokens after a prompt token at `temperature`, recording log μ under it: what an
  // actor's sampler does.
  Trajectory Sample(std::string id, std::string group, int64_t n, double temperature,
                    int64_t version) {
    torch::NoGradGuard no_grad;
    Trajectory t;
    t.id = std::move(id);
    t.group_id = std::move(group);
    t.AppendPrompt(0);
    for (int64_t j = 0; j < n; ++j) {
      const torch::Tensor logp =
          torch::log_softmax(table->weight[t.tokens.back()] / temperature, 0);
      const int64_t token = torch::multinomial(logp.exp(), 1).item<int64_t>();
      t.AppendGenerated(static_cast<int32_t>(token), logp[token].item<float>(), version);
    }
    int64_t good = 0;
    for (int64_t j = 1; j < t.size(); ++j) good += t.tokens[j] == kGoodToken;
    t.final_reward = static_cast<float>(good) / static_cast<float>(n);
    return t;
  }

  std::vector<Trajectory> Groups(int groups, int per_group, double temperature, int64_t version) {
    std::vector<Trajectory> batch;
    for (int g = 0; g < groups; ++g) {
      for (int i = 0; i < per_group; ++i) {
        batch.push_back(Sample(StrCat("g", g, "-", i), StrCat("g", g), 5, temperature, version));
      }
    }
    return batch;
  }
};

LearnerOptions Options(PolicyLossKind loss) {
  LearnerOptions o;
  o.loss = loss;
  o.buckets = {8, 16};
  o.token_budget = 32;
  o.lr = 0.05;
  o.grad_clip = 1.0;
  o.max_staleness = 2;
  return o;
}

TEST(LearnerStepTest, OnPolicyBatchHasRatioOneUnderTemperature) {
  torch::manual_seed(1);
  for (PolicyLossKind loss :
       {PolicyLossKind::kDecoupledPpo, PolicyLossKind::kPpoClip, PolicyLossKind::kTruncatedIs}) {
    BigramPolicy policy;
    LearnerStep learner(Options(loss), 100, policy.table->parameters(), policy.Forward(), nullptr,
                        /*temperature=*/0.7);
    auto result = learner.Step(policy.Groups(3, 4, 0.7, /*version=*/0));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_NEAR(result->diagnostics.mean_ratio(), 1.0, 1e-5);
    EXPECT_NEAR(result->diagnostics.mean_is_weight(), 1.0, 1e-5);
    EXPECT_EQ(result->diagnostics.clipped, 0);
    EXPECT_EQ(result->diagnostics.capped, 0);
    EXPECT_EQ(result->diagnostics.tokens, 12 * 5);
    EXPECT_EQ(result->optimizer.version, 1);
    EXPECT_GT(result->micro_batches, 1);  // gradient accumulation happened
    EXPECT_EQ(result->times.steps, 1);
  }
}

TEST(LearnerStepTest, WrongTemperatureShowsUpInTheRatio) {
  torch::manual_seed(2);
  BigramPolicy policy;
  LearnerStep learner(Options(PolicyLossKind::kDecoupledPpo), 100, policy.table->parameters(),
                      policy.Forward(), nullptr, /*temperature=*/1.0);
  auto result = learner.Step(policy.Groups(3, 4, /*sampled at*/ 0.5, 0));
  ASSERT_TRUE(result.ok()) << result.status();
  // Decoupled PPO's ratio is against the proximal policy (1 here); the behaviour weight π/μ
  // carries the mismatch.
  EXPECT_NEAR(result->diagnostics.mean_ratio(), 1.0, 1e-6);
  EXPECT_GT(std::abs(result->diagnostics.mean_is_weight() - 1.0), 1e-3);
}

TEST(LearnerStepTest, StaleTrajectoriesAreDroppedAndCounted) {
  torch::manual_seed(3);
  BigramPolicy policy;
  LearnerStep learner(Options(PolicyLossKind::kDecoupledPpo), 100, policy.table->parameters(),
                      policy.Forward(), nullptr, 1.0, RealClock(), /*initial_version=*/10);
  std::vector<Trajectory> batch = policy.Groups(2, 4, 1.0, /*version=*/9);
  for (Trajectory& t : policy.Groups(1, 3, 1.0, /*version=*/5)) batch.push_back(t);  // lag 5
  auto result = learner.Step(batch);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->staleness.dropped, 3);
  EXPECT_EQ(result->staleness.kept, 8);
  EXPECT_EQ(result->staleness.lag_counts.at(1), 8);
  EXPECT_EQ(result->optimizer.version, 11);
  EXPECT_EQ(result->ToJson()["dropped_stale"], 3);
  // By id, for the lease protocol: the last three (lag 5) dropped, the rest trained.
  const BatchDisposition& d = learner.last_disposition();
  EXPECT_EQ(d.stale, (std::vector<std::string>{"g0-0", "g0-1", "g0-2"}));
  EXPECT_EQ(d.trained.size(), 8u);
  EXPECT_EQ(d.trained.front(), "g0-0");
  EXPECT_EQ(d.trained.back(), "g1-3");
  EXPECT_TRUE(d.too_long.empty());
  EXPECT_TRUE(d.held_back.empty());

  // Only stale data: no step, a clear error, the version does not move.
  auto empty = learner.Step(policy.Groups(1, 2, 1.0, /*version=*/0));
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(empty.status().message(), HasSubstr("2 stale"));
  EXPECT_EQ(learner.version(), 11);
  EXPECT_EQ(learner.last_disposition().stale.size(), 2u);
  EXPECT_TRUE(learner.last_disposition().trained.empty());
}

TEST(LearnerStepTest, TrainingRaisesTheRewardedTokensProbability) {
  torch::manual_seed(4);
  BigramPolicy policy;
  LearnerOptions o = Options(PolicyLossKind::kDecoupledPpo);
  o.carry_over = true;
  LearnerStep learner(o, 100, policy.table->parameters(), policy.Forward());
  auto p_good = [&] {
    torch::NoGradGuard no_grad;
    return torch::softmax(policy.table->weight, 1).select(1, kGoodToken).mean().item<double>();
  };
  const double before = p_good();
  for (int step = 0; step < 30; ++step) {
    auto result = learner.Step(policy.Groups(4, 4, 1.0, learner.version()));
    ASSERT_TRUE(result.ok()) << result.status();
  }
  EXPECT_GT(p_good(), before + 0.2) << "before " << before;
  EXPECT_EQ(learner.version(), 30);
}

TEST(LearnerStepTest, AFailingForwardTakesNoStep) {
  torch::manual_seed(5);
  BigramPolicy policy;
  const torch::Tensor before = policy.table->weight.clone();
  PolicyForward broken = [&](const PackedMicroBatch& mb) -> absl::StatusOr<torch::Tensor> {
    return torch::matmul(policy.table->forward(mb.tokens), torch::ones({kVocab + 1, 2}));
  };
  LearnerStep learner(Options(PolicyLossKind::kDecoupledPpo), 100, policy.table->parameters(),
                      broken);
  auto result = learner.Step(policy.Groups(2, 2, 1.0, 0));
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("learner step 0: forward"));
  EXPECT_EQ(learner.version(), 0);
  EXPECT_TRUE(torch::equal(policy.table->weight, before));
}

TEST(LearnerStepTest, KlNeedsAReferenceAndVtraceAValueHead) {
  BigramPolicy policy;
  LearnerOptions o = Options(PolicyLossKind::kDecoupledPpo);
  o.kl_coef = 0.1;
  LearnerStep no_ref(o, 100, policy.table->parameters(), policy.Forward());
  EXPECT_THAT(no_ref.Step(policy.Groups(1, 2, 1.0, 0)).status().message(),
              HasSubstr("reference model"));

  BigramPolicy reference;
  LearnerStep with_ref(o, 100, policy.table->parameters(), policy.Forward(), reference.Forward());
  auto result = with_ref.Step(policy.Groups(2, 2, 1.0, 0));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->diagnostics.kl, 0.0);

  o = Options(PolicyLossKind::kVtrace);
  o.advantage = AdvantageKind::kVtrace;
  LearnerStep vtrace(o, 100, policy.table->parameters(), policy.Forward());
  EXPECT_THAT(vtrace.Step(policy.Groups(1, 2, 1.0, 0)).status().message(), HasSubstr("value head"));
}

}  // namespace
}  // namespace flywheel
