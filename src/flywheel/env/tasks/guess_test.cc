#include "flywheel/env/tasks/guess.h"

#include <gtest/gtest.h>

#include "flywheel/env/test_util.h"

namespace flywheel {
namespace {

TEST(GuessTest, ExpertAlwaysSolvesRandomScoresWellBelow) {
  GuessOptions options;  // range 16, 6 guesses
  GuessEnv env(options);
  auto expert = MakeGuessExpert(options);
  auto random = MakeGuessRandom(options, 3);
  EXPECT_EQ(testing::MeanReward(env, *expert, 300, 100), 1.0);
  // A random guesser succeeds with probability 1 - (15/16)^6 = 0.32.
  const double random_mean = testing::MeanReward(env, *random, 1000, 100);
  EXPECT_GT(random_mean, 0.2);
  EXPECT_LT(random_mean, 0.45);
}

TEST(GuessTest, HarderRangeStillSolvedByBinarySearch) {
  GuessOptions options{.range = 1000, .max_guesses = 10};
  GuessEnv env(options);
  auto expert = MakeGuessExpert(options);
  auto random = MakeGuessRandom(options, 3);
  EXPECT_EQ(testing::MeanReward(env, *expert, 100, 100), 1.0);
  EXPECT_LT(testing::MeanReward(env, *random, 300, 100), 0.05);
}

TEST(GuessTest, FeedbackNarrowsAndObservationsStayInVocabulary) {
  GuessEnv env(GuessOptions{});
  auto first = env.Reset(TaskInstance{"guess", 42});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->observation, "go");
  double last_progress = 0;
  for (const char* action : {"7", "banana", "-1", "3", "12"}) {
    auto r = env.Step(action);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(InVocabulary(env.vocabulary(), r->observation)) << r->observation;
    if (std::string_view(action) == "banana" || std::string_view(action) == "-1") {
      EXPECT_EQ(r->observation, "invalid");
    }
    ASSERT_TRUE(r->partial_score.has_value());
    EXPECT_GE(*r->partial_score, last_progress);
    last_progress = *r->partial_score;
    if (r->done) break;
  }
}

TEST(GuessTest, SameSeedSameNumberAndEpisodeEndsAfterMaxGuesses) {
  GuessEnv env(GuessOptions{.range = 16, .max_guesses = 2});
  std::vector<std::string> first_run;
  for (int run = 0; run < 2; ++run) {
    ASSERT_TRUE(env.Reset(TaskInstance{"guess", 9}).ok());
    auto a = env.Step("5");
    ASSERT_TRUE(a.ok());
    if (run == 0) first_run.push_back(a->observation);
    if (run == 1) {
      EXPECT_EQ(a->observation, first_run[0]);
    }
    if (a->done) continue;
    auto b = env.Step("5");
    ASSERT_TRUE(b.ok());
    EXPECT_TRUE(b->done);
    EXPECT_EQ(b->end, EpisodeEnd::kDone);
    EXPECT_FALSE(env.Step("5").ok()) << "stepping an ended episode is misuse";
  }
}

TEST(GuessTest, ProgressRewardPaysForTheShareOfTheRangeRuledOut) {
  GuessOptions options{.range = 16, .max_guesses = 6, .progress_reward = 0.5};
  GuessEnv env(options);
  auto expert = MakeGuessExpert(options);
  // Found: 1, plus 0.5 x the whole range ruled out.
  EXPECT_DOUBLE_EQ(testing::MeanReward(env, *expert, 50, 7), 1.5);

  int64_t hidden = -1;
  for (int64_t g = 0; g < 16 && hidden < 0; ++g) {
    GuessEnv probe(options);
    ASSERT_TRUE(probe.Reset(TaskInstance{"guess", 42}).ok());
    if (probe.Step(std::to_string(g))->observation == "correct") hidden = g;
  }
  ASSERT_GE(hidden, 0);
  ASSERT_TRUE(env.Reset(TaskInstance{"guess", 42}).ok());
  // A wrong guess at an end of [0, 15] narrows the interval's width of 15 by one.
  const int64_t edge = hidden > 0 ? 0 : 15;
  auto first = env.Step(std::to_string(edge));
  ASSERT_TRUE(first.ok());
  EXPECT_NEAR(first->reward, 0.5 / 15.0, 1e-12);
  // The same guess again rules out nothing and earns nothing.
  auto again = env.Step(std::to_string(edge));
  ASSERT_TRUE(again.ok());
  EXPECT_DOUBLE_EQ(again->reward, 0.0);
  // A guess in the middle narrows it by about half.
  GuessEnv middle(options);
  ASSERT_TRUE(middle.Reset(TaskInstance{"guess", 42}).ok());
  const int64_t mid = hidden == 7 ? 8 : 7;
  const double narrowed = mid < hidden ? mid + 1 : 15 - (mid - 1);
  EXPECT_NEAR(middle.Step(std::to_string(mid))->reward, 0.5 * narrowed / 15.0, 1e-12);
  // An unsolved episode stays below 1, whatever it ruled out.
  double total = first->reward + again->reward;
  for (int i = 0; i < 4; ++i) {
    auto r = env.Step(std::to_string((hidden + 1 + i) % 16));
    ASSERT_TRUE(r.ok());
    total += r->reward;
  }
  EXPECT_LT(total, 1.0);
}

TEST(GuessTest, ProgressRewardOutsideItsRangeIsRejected) {
  EXPECT_FALSE((GuessOptions{.progress_reward = 1.0}).Validate().ok());
  EXPECT_FALSE((GuessOptions{.progress_reward = -0.1}).Validate().ok());
  EXPECT_TRUE((GuessOptions{.progress_reward = 0.5}).Validate().ok());
}

TEST(GuessTest, StepBeforeResetIsAnError) {
  GuessEnv env(GuessOptions{});
  auto r = env.Step("3");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace flywheel
