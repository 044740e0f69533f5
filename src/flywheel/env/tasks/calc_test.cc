#include "flywheel/env/tasks/calc.h"

#include <gtest/gtest.h>

#include "flywheel/env/test_util.h"

namespace flywheel {
namespace {

TEST(CalcTest, EvaluatesWithPrecedenceAndRejectsMalformed) {
  EXPECT_EQ(EvaluateExpression("2 + 3 * 4"), 14);
  EXPECT_EQ(EvaluateExpression("(2 + 3) * 4"), 20);
  EXPECT_EQ(EvaluateExpression("10 - 2 - 3"), 5);
  EXPECT_EQ(EvaluateExpression(" -3 * -3 "), 9);
  EXPECT_EQ(EvaluateExpression("2 +"), std::nullopt);
  EXPECT_EQ(EvaluateExpression("2 / 3"), std::nullopt);
  EXPECT_EQ(EvaluateExpression("(1"), std::nullopt);
  EXPECT_EQ(EvaluateExpression("99999999999 * 99999999999"), std::nullopt);
  EXPECT_EQ(EvaluateExpression(std::string(1000, '(')), std::nullopt);
}

TEST(CalcTest, ExpertSolvesRandomScoresWellBelow) {
  for (int64_t operands : {2, 4}) {
    CalcOptions options{.num_operands = operands};
    CalcEnv env(options);
    auto expert = MakeCalcExpert();
    auto random = MakeCalcRandom(options, 5);
    EXPECT_EQ(testing::MeanReward(env, *expert, 200, 10), 1.0);
    EXPECT_LT(testing::MeanReward(env, *random, 500, 10), 0.05);
  }
}

TEST(CalcTest, ToolCallIsMarkedAndAnswerEndsTheEpisode) {
  CalcEnv env(CalcOptions{});
  auto first = env.Reset(TaskInstance{"calc", 3});
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->observation.starts_with("compute "));
  const std::string expression = first->observation.substr(8);
  auto call = env.Step("CALL calc " + expression);
  ASSERT_TRUE(call.ok());
  EXPECT_EQ(call->tool, "calc");
  EXPECT_EQ(call->observation, std::to_string(*EvaluateExpression(expression)));
  EXPECT_EQ(call->partial_score, 0.5);
  EXPECT_FALSE(call->done);

  auto junk = env.Step("what is this");
  ASSERT_TRUE(junk.ok());
  EXPECT_EQ(junk->observation, "invalid");
  EXPECT_TRUE(junk->tool.empty());

  auto wrong = env.Step("ANSWER " + call->observation + "1");
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(wrong->observation, "wrong");
  EXPECT_EQ(wrong->reward, 0);
  EXPECT_TRUE(wrong->done);
}

TEST(CalcTest, RunsOutOfTurns) {
  CalcEnv env(CalcOptions{.num_operands = 2, .max_operand = 99, .max_turns = 2});
  ASSERT_TRUE(env.Reset(TaskInstance{"calc", 1}).ok());
  ASSERT_FALSE(env.Step("CALL calc 1 + 1")->done);
  auto last = env.Step("CALL calc 1 + 1");
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(last->done);
  EXPECT_EQ(last->reward, 0);
}

}  // namespace
}  // namespace flywheel
