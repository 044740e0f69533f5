#include "flywheel/learner/advantages.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

namespace flywheel {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// prompt 2 tokens, action 2, observation 1, action 1.
Trajectory Make(std::string id, std::string group, float reward) {
  Trajectory t;
  t.id = std::move(id);
  t.group_id = std::move(group);
  t.AppendPrompt(1);
  t.AppendPrompt(2);
  t.AppendGenerated(3, -0.5f, 0);
  t.AppendGenerated(4, -0.5f, 0);
  t.AppendPrompt(5);
  t.AppendGenerated(6, -0.5f, 0);
  t.final_reward = reward;
  return t;
}

TEST(AdvantagesTest, GrpoNormalisesByGroupMeanAndStd) {
  const std::vector<double> rewards = {1, 0, 0, 1};  // mean 0.5, population std 0.5
  const double eps = 1e-6;
  const auto a = GroupNormalizedAdvantages(rewards, /*divide_by_std=*/true, eps);
  const double hi = 0.5 / (0.5 + eps);
  EXPECT_THAT(a, ElementsAre(DoubleNear(hi, 1e-12), DoubleNear(-hi, 1e-12), DoubleNear(-hi, 1e-12),
                             DoubleNear(hi, 1e-12)));
  EXPECT_THAT(GroupNormalizedAdvantages(rewards, false, eps), ElementsAre(0.5, -0.5, -0.5, 0.5));
  // {3, 1, 2}: mean 2, var (1 + 1 + 0) / 3.
  const std::vector<double> r2 = {3, 1, 2};
  const double std2 = std::sqrt(2.0 / 3.0);
  EXPECT_THAT(GroupNormalizedAdvantages(r2, true, 0.1),
              ElementsAre(DoubleNear(1 / (std2 + 0.1), 1e-12), DoubleNear(-1 / (std2 + 0.1), 1e-12),
                          DoubleNear(0, 1e-12)));
}

TEST(AdvantagesTest, IdenticalRewardsAndSingletonGroupsGiveZero) {
  const std::vector<double> same = {0.7, 0.7, 0.7};
  EXPECT_THAT(GroupNormalizedAdvantages(same, true, 1e-6),
              ElementsAre(DoubleNear(0, 1e-9), DoubleNear(0, 1e-9), DoubleNear(0, 1e-9)));
  const std::vector<double> one = {5.0};
  EXPECT_THAT(GroupNormalizedAdvantages(one, true, 1e-6), ElementsAre(0));
}

TEST(AdvantagesTest, TimedOutEpisodeEarnsScaledPartialScore) {
  Trajectory t = Make("t", "g", 0.0f);
  t.termination = Termination::kTimeout;
  t.partial_score = 0.4f;
  EXPECT_NEAR(EpisodeReward(t, 1.0), 0.4, 1e-7);
  EXPECT_NEAR(EpisodeReward(t, 0.5), 0.2, 1e-7);
  t.partial_score.reset();  // no score: the final reward stands
  EXPECT_EQ(EpisodeReward(t, 1.0), 0.0);
  Trajectory done = Make("d", "g", 1.0f);
  done.partial_score = 0.3f;  // ignored unless the episode timed out
  EXPECT_EQ(EpisodeReward(done, 1.0), 1.0);
}

TEST(AdvantagesTest, TurnReturnsDiscountPerTurn) {
  Trajectory t = Make("t", "g", 4.0f);
  t.turn_ends = {2, 4, 6};
  t.turn_rewards = {1.0f, 0.0f, 2.0f};
  // Episode reward 4 = turns 3 + outcome 1 at the last turn: rewards 1, 0, 3; γ = 0.5
  // G2 = 3, G1 = 0 + 0.5·3 = 1.5, G0 = 1 + 0.5·1.5 = 1.75
  EXPECT_THAT(TurnReturns(t, 0.5, 1.0), ElementsAre(1.75, 1.5, 3.0));
  EXPECT_THAT(TokenTurns(t), ElementsAre(0, 0, 1, 1, 2, 2));
}

TEST(AdvantagesTest, TokensAfterTheLastTurnFormAnImplicitTurn) {
  Trajectory t = Make("t", "g", 3.0f);
  t.turn_ends = {4};
  t.turn_rewards = {1.0f};  // and 2 more at the end of the implicit turn
  EXPECT_THAT(TurnReturns(t, 1.0, 1.0), ElementsAre(3.0, 2.0));
  EXPECT_THAT(TokenTurns(t), ElementsAre(0, 0, 0, 0, 1, 1));
  Trajectory none = Make("n", "g", 2.0f);
  EXPECT_THAT(TurnReturns(none, 0.9, 1.0), ElementsAre(2.0));
}

TEST(AdvantagesTest, ComputeGrpoPerGroupOnTrainableTokensOnly) {
  std::vector<Trajectory> batch = {Make("a", "g1", 1), Make("b", "g2", 5), Make("c", "g1", 0),
                                   Make("d", "", 9)};
  batch[2].termination = Termination::kTimeout;
  batch[2].partial_score = 0.5f;  // g1 rewards: 1, 0.5 → mean 0.75, std 0.25
  AdvantageOptions options;
  options.kind = AdvantageKind::kGrpoNoStd;
  auto adv = ComputeAdvantages(batch, options);
  ASSERT_TRUE(adv.ok()) << adv.status();
  EXPECT_THAT((*adv)[0], ElementsAre(0, 0, 0.25f, 0.25f, 0, 0.25f));
  EXPECT_THAT((*adv)[2], ElementsAre(0, 0, -0.25f, -0.25f, 0, -0.25f));
  EXPECT_THAT((*adv)[1], ElementsAre(0, 0, 0, 0, 0, 0));  // a group of one
  EXPECT_THAT((*adv)[3], ElementsAre(0, 0, 0, 0, 0, 0));  // no group id: alone

  options.kind = AdvantageKind::kGrpo;
  adv = ComputeAdvantages(batch, options);
  ASSERT_TRUE(adv.ok());
  EXPECT_NEAR((*adv)[0][2], 0.25 / (0.25 + 1e-6), 1e-6);
  EXPECT_NEAR((*adv)[2][5], -0.25 / (0.25 + 1e-6), 1e-6);
}

TEST(AdvantagesTest, ComputeTurnReturnsMinusGroupBaseline) {
  std::vector<Trajectory> batch = {Make("a", "g", 1.5f), Make("b", "g", 0)};
  batch[0].turn_ends = {4, 6};
  batch[0].turn_rewards = {0.5f, 0.0f};
  // a: rewards {0.5, 0 + 1 outcome} → G = {1.5, 1};  b: one implicit turn, G = {0}. Baseline 0.75.
  AdvantageOptions options;
  options.kind = AdvantageKind::kTurnReturn;
  auto adv = ComputeAdvantages(batch, options);
  ASSERT_TRUE(adv.ok()) << adv.status();
  EXPECT_THAT((*adv)[0], ElementsAre(0, 0, 0.75f, 0.75f, 0, 0.25f));
  EXPECT_THAT((*adv)[1], ElementsAre(0, 0, -0.75f, -0.75f, 0, -0.75f));
}

TEST(AdvantagesTest, TurnRewardsAreNotCountedTwice) {
  Trajectory t = Make("t", "g", 0.75f);  // the actor's episode reward: the sum of its turns
  t.turn_ends = {2, 4, 6};
  t.turn_rewards = {0.25f, 0.0f, 0.5f};
  EXPECT_THAT(TurnReturns(t, 1.0, 1.0), ElementsAre(0.75, 0.5, 0.5));
  t.termination = Termination::kTimeout;  // a timeout's partial score replaces the turns' sum
  t.partial_score = 0.25f;
  EXPECT_THAT(TurnReturns(t, 1.0, 1.0), ElementsAre(0.25, 0.0, 0.0));
}

TEST(AdvantagesTest, TurnGrpoComparesEachTurnWithTheSameTurnOfTheGroup) {
  // Three members; c has one turn only. γ = 1.
  std::vector<Trajectory> batch = {Make("a", "g", 1.0f), Make("b", "g", 0.5f),
                                   Make("c", "g", 0.0f)};
  batch[0].turn_ends = {4, 6};
  batch[0].turn_rewards = {0.0f, 1.0f};  // G = {1, 1}
  batch[1].turn_ends = {4, 6};
  batch[1].turn_rewards = {0.5f, 0.0f};  // G = {0.5, 0}
  batch[2].turn_ends = {6};
  batch[2].turn_rewards = {0.0f};  // G = {0}
  AdvantageOptions options;
  options.kind = AdvantageKind::kTurnGrpo;
  options.grpo_eps = 1e-9;
  auto adv = ComputeAdvantages(batch, options);
  ASSERT_TRUE(adv.ok()) << adv.status();
  // Turn 0: {1, 0.5, 0}: mean 0.5, population std sqrt(1/6).
  const double s0 = std::sqrt(1.0 / 6.0);
  EXPECT_NEAR((*adv)[0][2], 0.5 / s0, 1e-5);
  EXPECT_NEAR((*adv)[1][2], 0.0, 1e-5);
  EXPECT_NEAR((*adv)[2][2], -0.5 / s0, 1e-5);
  EXPECT_NEAR((*adv)[2][5], -0.5 / s0, 1e-5);  // c's only turn covers all its tokens
  // Turn 1 (a and b only): {1, 0}: mean 0.5, std 0.5.
  EXPECT_NEAR((*adv)[0][5], 1.0, 1e-5);
  EXPECT_NEAR((*adv)[1][5], -1.0, 1e-5);
  EXPECT_EQ((*adv)[0][0], 0.0f);  // prompt tokens stay 0
}

TEST(AdvantagesTest, RejectsInvalidTrajectoryAndVtrace) {
  std::vector<Trajectory> batch = {Make("broken-7", "g", 1)};
  batch[0].logprobs.pop_back();
  auto adv = ComputeAdvantages(batch, AdvantageOptions{});
  ASSERT_FALSE(adv.ok());
  EXPECT_THAT(adv.status().message(), HasSubstr("broken-7"));
  AdvantageOptions vtrace;
  vtrace.kind = AdvantageKind::kVtrace;
  EXPECT_THAT(ComputeAdvantages({}, vtrace).status().message(), HasSubstr("VtraceTargets"));
}

}  // namespace
}  // namespace flywheel
