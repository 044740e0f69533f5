#include "flywheel/core/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace flywheel::config {
namespace {

using ::testing::HasSubstr;

enum class Mode { kAsync, kColocated };
constexpr ChoiceName<Mode> kModeNames[] = {{"async", Mode::kAsync},
                                          {"colocated", Mode::kColocated}};

struct ScheduleOptions {
  int64_t warmup_steps = 10;
  template <typename V>
  void VisitFields(V& v) {
    v.Field("warmup_steps", warmup_steps, "linear warm-up");
  }
};

struct LearnerOptions {
  double lr = 3e-4;
  int batch_size = 32;
  bool clip = true;
  std::vector<int64_t> buckets = {128, 256};
  ScheduleOptions schedule;
  template <typename V>
  void VisitFields(V& v) {
    v.Field("lr", lr, "learning rate");
    v.Field("batch_size", batch_size);
    v.Field("clip", clip);
    v.Field("buckets", buckets);
    v.Section("schedule", schedule);
  }
};

struct RunOptions {
  std::string name = "run";
  Mode mode = Mode::kAsync;
  template <typename V>
  void VisitFields(V& v) {
    v.Field("name", name);
    v.Choice("mode", mode, kModeNames);
  }
};

struct TestConfig {
  RunOptions run;
  LearnerOptions learner;
  template <typename V>
  void VisitFields(V& v) {
    v.Section("run", run);
    v.Section("learner", learner);
  }
};

absl::StatusOr<TestConfig> Load(std::string_view text, std::vector<std::string> overrides = {}) {
  auto table = ParseToml(text, "job.toml");
  if (!table.ok()) return table.status();
  for (const auto& o : overrides) {
    if (auto s = ApplyOverride(*table, o); !s.ok()) return s;
  }
  TestConfig config;
  if (auto s = Bind(*table, "job.toml", config); !s.ok()) return s;
  return config;
}

TEST(ConfigTest, ReadsValuesAndKeepsDefaults) {
  auto c = Load("[learner]\nlr = 1e-3\nbuckets = [64]\n[learner.schedule]\nwarmup_steps = 5\n"
                "[run]\nmode = \"colocated\"\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->learner.lr, 1e-3);
  EXPECT_EQ(c->learner.batch_size, 32);
  EXPECT_EQ(c->learner.buckets, std::vector<int64_t>{64});
  EXPECT_EQ(c->learner.schedule.warmup_steps, 5);
  EXPECT_EQ(c->run.mode, Mode::kColocated);
}

TEST(ConfigTest, IntegerIsAcceptedForAFloat) {
  auto c = Load("[learner]\nlr = 1\n");
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->learner.lr, 1.0);
}

TEST(ConfigTest, MistypedKeySuggestsTheClosest) {
  auto c = Load("[learner]\nlrr = 1e-3\n");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("job.toml:2"));
  EXPECT_THAT(c.status().message(), HasSubstr("unknown key learner.lrr, did you mean learner.lr?"));
}

TEST(ConfigTest, KeyInTheWrongSectionSuggestsTheRightOne) {
  auto c = Load("[run]\nwarmup_steps = 3\n");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("unknown key run.warmup_steps, did you mean learner.schedule.warmup_steps?"));
}

TEST(ConfigTest, UnknownSectionIsAnError) {
  auto c = Load("[lerner]\nlr = 1e-3\n");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("unknown key lerner, did you mean learner?"));
}

TEST(ConfigTest, WrongTypeNamesKeyAndType) {
  auto c = Load("[learner]\nbatch_size = \"big\"\n");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("key learner.batch_size: expected an integer, got string \"big\""));
  c = Load("[learner]\nbuckets = [64, \"x\"]\n");
  EXPECT_THAT(c.status().message(), HasSubstr("learner.buckets[1]"));
  c = Load("[learner]\nbatch_size = 99999999999\n");
  EXPECT_THAT(c.status().message(), HasSubstr("out of range"));
}

TEST(ConfigTest, UnknownChoiceListsTheAllowedValues) {
  auto c = Load("[run]\nmode = \"sync\"\n");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("expected one of: async, colocated"));
}

TEST(ConfigTest, ReportsEveryErrorAtOnce) {
  auto c = Load("[learner]\nlrr = 1\nclip = 3\n");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("learner.lrr"));
  EXPECT_THAT(c.status().message(), HasSubstr("learner.clip"));
}

TEST(ConfigTest, SyntaxErrorNamesLine) {
  auto c = Load("[learner]\nlr = = 3\n");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("job.toml:2:"));
  EXPECT_THAT(c.status().message(), HasSubstr("syntax error"));
}

TEST(ConfigTest, OverridesReplaceAndCreate) {
  auto c = Load("[learner]\nlr = 1e-3\n",
                {"learner.lr=3e-4", "run.name=exp1", "learner.schedule.warmup_steps=7",
                 "learner.buckets=[32, 64]", "run.mode=colocated"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->learner.lr, 3e-4);
  EXPECT_EQ(c->run.name, "exp1");
  EXPECT_EQ(c->learner.schedule.warmup_steps, 7);
  EXPECT_EQ(c->learner.buckets, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(c->run.mode, Mode::kColocated);
}

TEST(ConfigTest, BadOverrideIsNamedAsSuch) {
  auto c = Load("", {"learner.lrr=1"});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("--set: unknown key learner.lrr"));
  EXPECT_THAT(c.status().message(), HasSubstr("did you mean learner.lr?"));
  c = Load("", {"learner.lr"});
  EXPECT_THAT(c.status().message(), HasSubstr("expected KEY=VALUE"));
  c = Load("", {"learner.lr.x=1"});
  EXPECT_FALSE(c.ok());
}

TEST(ConfigTest, FormatReadsBackToTheSameValues) {
  TestConfig original;
  original.learner.lr = 0.125;
  original.learner.buckets = {8, 16, 32};
  original.run.mode = Mode::kColocated;
  original.run.name = "a \"quoted\" name";
  const std::string text = Format(original);
  EXPECT_THAT(text, HasSubstr("[learner.schedule]"));
  EXPECT_THAT(text, HasSubstr("# learning rate"));
  auto c = Load(text);
  ASSERT_TRUE(c.ok()) << c.status() << "\n" << text;
  EXPECT_DOUBLE_EQ(c->learner.lr, 0.125);
  EXPECT_EQ(c->learner.buckets, original.learner.buckets);
  EXPECT_EQ(c->run.mode, Mode::kColocated);
  EXPECT_EQ(c->run.name, original.run.name);
}

TEST(ConfigTest, ClosestKeyNeedsToBeClose) {
  std::vector<std::string> keys = {"lr", "batch_size", "max_staleness"};
  EXPECT_EQ(ClosestKey("max_stalenes", keys), "max_staleness");
  EXPECT_EQ(ClosestKey("batchsize", keys), "batch_size");
  EXPECT_EQ(ClosestKey("temperature", keys), "");
}

}  // namespace
}  // namespace flywheel::config
