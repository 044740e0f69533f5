#include "flywheel/env/tasks/repair.h"

#include <gtest/gtest.h>

#include "flywheel/env/task_source.h"
#include "flywheel/env/test_util.h"

namespace flywheel {
namespace {

TEST(RepairTest, EveryBugBreaksATestAndTheInstanceIsDeterministic) {
  RepairOptions options{.num_lines = 8, .num_bugs = 2, .num_tests = 6, .max_turns = 20};
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const RepairInstance a = GenerateRepair(options, seed);
    const RepairInstance b = GenerateRepair(options, seed);
    ASSERT_EQ(a.buggy.lines.size(), 8u);
    int differing = 0;
    for (size_t i = 0; i < a.buggy.lines.size(); ++i) {
      EXPECT_EQ(a.buggy.LineText(i), b.buggy.LineText(i));
      differing += a.buggy.LineText(i) != a.correct.LineText(i);
    }
    EXPECT_EQ(differing, 2) << "seed " << seed;
    int failing = 0;
    for (int x : a.test_inputs) failing += a.buggy.Run(x) != a.correct.Run(x);
    EXPECT_GT(failing, 0) << "seed " << seed;
  }
}

TEST(RepairTest, ExpertSolvesRandomScoresWellBelow) {
  RepairOptions options;  // 6 lines, 1 bug, 6 tests, 16 turns
  RepairEnv env(options);
  auto expert = MakeRepairExpert(options);
  auto random = MakeRepairRandom(options, 11);
  EXPECT_EQ(testing::MeanReward(env, *expert, 200, 1000), 1.0);
  const double random_mean = testing::MeanReward(env, *random, 500, 1000);
  EXPECT_LT(random_mean, 0.6);
}

// Plays `episodes` instances with the search expert; every action it takes must be accepted.
double SearchSuccess(const RepairOptions& options, int episodes) {
  RepairEnv env(options);
  auto expert = MakeRepairExpert(options);
  TaskSource tasks("test", 5, 1);
  int solved = 0;
  for (int i = 0; i < episodes; ++i) {
    const TaskInstance task = tasks.Next();
    auto step = env.Reset(task);
    EXPECT_TRUE(step.ok());
    expert->Begin(task, step->observation);
    while (!step->done) {
      const std::string action = expert->Act(step->observation);
      step = env.Step(action);
      EXPECT_TRUE(step.ok());
      EXPECT_NE(step->observation, "invalid") << action;
    }
    solved += step->reward == 1.0;
  }
  return static_cast<double>(solved) / episodes;
}

TEST(RepairTest, SearchExpertSolvesMoreTheLongerItKeepsTrying) {
  // Measured by a transcription of the generator (bench/repair_fixes.py, 4,000 instances):
  // one edit and submit 0.03; never giving up within 16 turns (7 edits) 0.20; giving up half
  // the time 0.06. Bounds are several standard errors (about 0.015 at 600 episodes) wide.
  RepairOptions options{.expert = RepairExpertKind::kSearch, .expert_give_up = 0.0};
  const double persistent = SearchSuccess(options, 600);
  options.expert_give_up = 0.5;
  const double halfhearted = SearchSuccess(options, 600);
  options.expert_give_up = 1.0;
  const double once = SearchSuccess(options, 600);
  EXPECT_GT(persistent, 0.14);
  EXPECT_LT(persistent, 0.28);
  EXPECT_LT(once, 0.08);
  EXPECT_GT(persistent, halfhearted + 0.08);
  EXPECT_GE(halfhearted, once - 0.02);
  const absl::Status bad = RepairOptions{.expert_give_up = 1.5}.Validate();
  EXPECT_EQ(bad.message(), "env.repair.expert_give_up must be in [0, 1]");
}

TEST(RepairTest, WithoutPartialCreditOnlyAFullFixScores) {
  RepairOptions options{.partial_credit = false};
  RepairEnv env(options);
  auto first = env.Reset(TaskInstance{"repair", 4});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first->partial_score, 0.0) << first->observation;  // a bug fails some test
  auto expert = MakeRepairExpert(options);
  EXPECT_EQ(testing::MeanReward(env, *expert, 50, 1000), 1.0);
  auto random = MakeRepairRandom(options, 11);
  EXPECT_LT(testing::MeanReward(env, *random, 200, 1000), 0.2);
}

TEST(RepairTest, LongHorizonVariant) {
  RepairOptions options{.num_lines = 60, .num_bugs = 20, .num_tests = 10, .max_turns = 300};
  RepairEnv env(options);
  auto expert = MakeRepairExpert(options);
  auto random = MakeRepairRandom(options, 11);
  EXPECT_EQ(testing::MeanReward(env, *expert, 20, 1000), 1.0);
  EXPECT_LT(testing::MeanReward(env, *random, 50, 1000), 0.4);
}

TEST(RepairTest, ActionsAndObservationsSpeakTheVocabulary) {
  RepairOptions options;
  RepairEnv env(options);
  auto first = env.Reset(TaskInstance{"repair", 4});
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->observation.starts_with("passed ")) << first->observation;
  EXPECT_LT(*first->partial_score, 1.0);
  for (const char* action : {"inspect", "inspect 2", "inspect 99", "test", "patch 2 v2 = v1 + 3",
                             "patch 2 v3 = x + 1", "patch 1 v1 = v2 + 1", "patch 1 v1 = x / 2",
                             "patch 3 * 7", "patch 3 / 7", "patch 1 + v1", "patch 3 -", "dance"}) {
    auto r = env.Step(action);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(InVocabulary(env.vocabulary(), r->observation))
        << action << " → " << r->observation;
    EXPECT_TRUE(InVocabulary(env.vocabulary(), action) || r->observation == "invalid") << action;
    const std::string_view a(action);
    if (a == "patch 2 v2 = v1 + 3") {
      EXPECT_EQ(r->observation, "ok");
    }
    if (a == "inspect 2") {
      EXPECT_EQ(r->observation.substr(0, 7), "2 : v2 ");
    }
    if (a == "patch 3 * 7") {  // the short form keeps the first operand
      EXPECT_EQ(r->observation, "ok");
      EXPECT_EQ(env.Step("inspect 3")->observation, "3 : v3 = v2 * 7");
    }
    if (a == "inspect 99" || a == "patch 2 v3 = x + 1" || a == "patch 1 v1 = v2 + 1" ||
        a == "patch 1 v1 = x / 2" || a == "patch 3 / 7" || a == "patch 1 + v1" ||
        a == "patch 3 -" || a == "dance") {
      EXPECT_EQ(r->observation, "invalid") << action;
    }
  }
}

TEST(RepairTest, HorizonEndsAsTimeoutWithPartialScore) {
  RepairEnv env(RepairOptions{.num_lines = 6, .num_bugs = 1, .num_tests = 6, .max_turns = 3});
  ASSERT_TRUE(env.Reset(TaskInstance{"repair", 1}).ok());
  ASSERT_FALSE(env.Step("test")->done);
  ASSERT_FALSE(env.Step("inspect")->done);
  auto last = env.Step("inspect");
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(last->done);
  EXPECT_EQ(last->end, EpisodeEnd::kTimeout);
  EXPECT_EQ(last->reward, 0);
  ASSERT_TRUE(last->partial_score.has_value());
  EXPECT_EQ(*env.ScorePartial(), *last->partial_score);
}

}  // namespace
}  // namespace flywheel
