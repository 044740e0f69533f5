#include "flywheel/env/tasks/copy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "flywheel/env/task_source.h"
#include "flywheel/env/tasks/text.h"
#include "flywheel/env/test_util.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

// The length of the string a reset shows.
int64_t ShownLength(CopyEnv& env, uint64_t seed) {
  auto first = env.Reset(TaskInstance{"copy", seed});
  EXPECT_TRUE(first.ok()) << first.status();
  return first.ok() ? static_cast<int64_t>(SplitWords(first->observation).size()) : -1;
}

// The q-quantile of sorted values (nearest rank).
int64_t Quantile(const std::vector<int64_t>& sorted, double q) {
  return sorted[static_cast<size_t>(q * static_cast<double>(sorted.size() - 1))];
}

TEST(CopyTest, ResetShowsDigitsOfTheVocabularyAndTheSameSeedTheSameString) {
  CopyEnv env(CopyOptions{});
  auto a = env.Reset(TaskInstance{"copy", 11});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(InVocabulary(env.vocabulary(), a->observation)) << a->observation;
  ASSERT_TRUE(a->partial_score.has_value());
  EXPECT_EQ(*a->partial_score, 0.0);
  for (std::string_view word : SplitWords(a->observation)) {
    ASSERT_EQ(word.size(), 1u);
    EXPECT_TRUE(word[0] >= '0' && word[0] <= '9') << word;
  }
  auto b = env.Reset(TaskInstance{"copy", 11});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->observation, b->observation);
}

TEST(CopyTest, ExactAnswerEarnsOneAndEndsTheEpisode) {
  CopyEnv env(CopyOptions{});
  auto first = env.Reset(TaskInstance{"copy", 3});
  ASSERT_TRUE(first.ok());
  auto r = env.Step(StrCat(first->observation, " end"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reward, 1.0);
  EXPECT_TRUE(r->done);
  EXPECT_EQ(r->end, EpisodeEnd::kDone);
  EXPECT_EQ(r->observation, "correct");
  EXPECT_TRUE(InVocabulary(env.vocabulary(), r->observation));
  EXPECT_EQ(env.Step("0 end").status().code(), absl::StatusCode::kFailedPrecondition)
      << "stepping an ended episode is misuse";
}

TEST(CopyTest, RewardIsTheShareOfTargetPositionsRight) {
  // A fixed string of length 5: min_length = max_length.
  CopyEnv env(CopyOptions{.min_length = 5, .max_length = 5});
  auto first = env.Reset(TaskInstance{"copy", 8});
  ASSERT_TRUE(first.ok());
  const std::vector<std::string_view> shown = SplitWords(first->observation);
  ASSERT_EQ(shown.size(), 5u);
  const std::string digits = first->observation;  // the target is these 5 words and "end"
  struct Case {
    std::string answer;
    double reward;
  };
  const std::string wrong0 = shown[0] == "0" ? "1" : "0";
  const std::vector<Case> cases = {
      {StrCat(digits, " end"), 1.0},
      {digits, 5.0 / 6},  // no end marker (cut off by max_new_tokens): never exact
      {StrCat(digits, " end 7"), 6.0 / 7},  // a word after the end marker counts against it
      {StrCat(shown[0], " ", shown[1], " end"), 2.0 / 6},
      {StrCat(wrong0, digits.substr(1), " end"), 5.0 / 6},
      {"", 0.0},
      {"correct wrong", 0.0},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(env.Reset(TaskInstance{"copy", 8}).ok());
    auto r = env.Step(c.answer);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NEAR(r->reward, c.reward, 1e-12) << "answer '" << c.answer << "' to '" << digits << "'";
    EXPECT_EQ(r->observation, c.reward == 1.0 ? "correct" : "wrong");
    ASSERT_TRUE(r->partial_score.has_value());
    EXPECT_EQ(*r->partial_score, r->reward);
    auto partial = env.ScorePartial();
    ASSERT_TRUE(partial.ok());
    EXPECT_EQ(*partial, r->reward);
  }
}

TEST(CopyTest, PartialScoreIsZeroBeforeTheAnswer) {
  CopyEnv env(CopyOptions{});
  EXPECT_EQ(env.ScorePartial().status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(env.Reset(TaskInstance{"copy", 1}).ok());
  auto before = env.ScorePartial();
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(*before, 0.0);
  // A budget that expires before the answer: RunEpisode with no step allowed scores partially.
  auto expert = MakeCopyExpert();
  auto summary = RunEpisode(env, *expert, TaskInstance{"copy", 1}, 0);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->end, EpisodeEnd::kTimeout);
  EXPECT_EQ(summary->partial_score.value_or(-1), 0.0);
}

TEST(CopyTest, StepBeforeResetIsAnError) {
  CopyEnv env(CopyOptions{});
  EXPECT_EQ(env.Step("1 end").status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CopyTest, ExpertAlwaysSolvesRandomKnowsOnlyTheFormat) {
  CopyOptions options;
  CopyEnv env(options);
  auto expert = MakeCopyExpert();
  auto random = MakeCopyRandom(options, 5);
  EXPECT_EQ(testing::MeanReward(env, *expert, 500, 1), 1.0);
  // Right length and end marker, a tenth of the digits: (L / 10 + 1) / (L + 1), 0.22 over the
  // length distribution.
  const double random_mean = testing::MeanReward(env, *random, 2000, 1);
  EXPECT_GT(random_mean, 0.17);
  EXPECT_LT(random_mean, 0.27);
  // A smaller alphabet is easier to guess.
  CopyOptions binary{.alphabet = 2};
  CopyEnv binary_env(binary);
  auto binary_random = MakeCopyRandom(binary, 5);
  EXPECT_GT(testing::MeanReward(binary_env, *binary_random, 2000, 1), 0.5);
}

TEST(CopyTest, LengthsStayInRangeWithAHeavyTailAtTheDefaults) {
  CopyOptions options;  // lengths in [4, 64], alpha 1.2
  CopyEnv env(options);
  TaskSource tasks("copy", 17, 1);
  std::vector<int64_t> lengths;
  for (int i = 0; i < 20000; ++i) lengths.push_back(ShownLength(env, tasks.Next().seed));
  std::sort(lengths.begin(), lengths.end());
  EXPECT_EQ(lengths.front(), options.min_length);
  EXPECT_EQ(lengths.back(), options.max_length) << "the longest strings are drawn too";
  const int64_t p50 = Quantile(lengths, 0.5), p90 = Quantile(lengths, 0.9),
                p99 = Quantile(lengths, 0.99);
  RecordProperty("p50", static_cast<int>(p50));  // in --gtest_output=xml, for the docs' table
  RecordProperty("p90", static_cast<int>(p90));
  RecordProperty("p99", static_cast<int>(p99));
  // The bounded Pareto's quantiles (copy.h): 6, 21, 53.
  EXPECT_NEAR(p50, 6, 1);
  EXPECT_NEAR(p90, 21, 2);
  EXPECT_NEAR(p99, 53, 3);
  EXPECT_GE(static_cast<double>(p99) / static_cast<double>(p50), 4.0)
      << "p50 " << p50 << ", p90 " << p90 << ", p99 " << p99;
}

TEST(CopyTest, LengthDistributionMatchesTheBoundedParetoTail) {
  // P(L >= l) = ((m/l)^a - (m/H)^a) / (1 - (m/H)^a), H = max_length + 1 (copy.h).
  const CopyOptions options{.min_length = 2, .max_length = 40, .length_alpha = 0.8};
  CopyLengthDistribution lengths(options);
  std::mt19937_64 rng(99);
  constexpr int kDraws = 200000;
  std::vector<int64_t> at_least(options.max_length + 2, 0);
  for (int i = 0; i < kDraws; ++i) {
    const int64_t l = lengths(rng);
    ASSERT_GE(l, options.min_length);
    ASSERT_LE(l, options.max_length);
    for (int64_t k = 0; k <= l; ++k) ++at_least[k];
  }
  const double m = 2, h = 41, a = 0.8, below_h = std::pow(m / h, a);
  for (int64_t l : {2, 3, 5, 10, 20, 40}) {
    const double expected = (std::pow(m / static_cast<double>(l), a) - below_h) / (1 - below_h);
    EXPECT_NEAR(static_cast<double>(at_least[l]) / kDraws, expected, 0.005)
        << "P(L >= " << l << ")";
  }
}

TEST(CopyTest, BadOptionsAreRejectedNamingTheKey) {
  struct Bad {
    CopyOptions options;
    std::string key;
  };
  const std::vector<Bad> bad = {
      {{.min_length = 0}, "env.copy.min_length"},
      {{.min_length = 10, .max_length = 5}, "env.copy.max_length"},
      {{.max_length = 5000}, "env.copy.max_length"},
      {{.length_alpha = 0}, "env.copy.length_alpha"},
      {{.length_alpha = -1}, "env.copy.length_alpha"},
      {{.length_alpha = std::nan("")}, "env.copy.length_alpha"},
      {{.alphabet = 1}, "env.copy.alphabet"},
      {{.alphabet = 11}, "env.copy.alphabet"},
  };
  for (const Bad& b : bad) {
    absl::Status s = b.options.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.key;
    EXPECT_THAT(s.message(), HasSubstr(b.key));
  }
  EXPECT_TRUE((CopyOptions{}).Validate().ok());
  EXPECT_TRUE((CopyOptions{.min_length = 7, .max_length = 7}).Validate().ok());
  EnvOptions env;
  env.copy.alphabet = 0;
  EXPECT_THAT(env.Validate().message(), HasSubstr("env.copy.alphabet"));
}

}  // namespace
}  // namespace flywheel
