#include "flywheel/env/env_factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/env/env_executor.h"
#include "flywheel/env/test_util.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

TEST(EnvFactoryTest, BuiltInTasksWithTheirVocabulariesAndPolicies) {
  for (EnvKind kind : {EnvKind::kGuess, EnvKind::kCalc, EnvKind::kRepair, EnvKind::kCopy}) {
    EnvOptions options;
    options.kind = kind;
    auto factory = EnvFactory::Create(options);
    ASSERT_TRUE(factory.ok()) << factory.status();
    const VocabularySpec& vocab = (*factory)->vocabulary();
    EXPECT_EQ(vocab.kind == VocabularySpec::kBytes, kind == EnvKind::kCalc);
    if (vocab.kind == VocabularySpec::kWords) {
      EXPECT_GT(vocab.words.size(), 10u);
      EXPECT_LT(vocab.words.size(), 100u) << "word vocabularies are small";
    }
    auto env = (*factory)->NewEnvironment();
    auto expert = (*factory)->MakeExpert();
    ASSERT_TRUE(expert.ok());
    auto summary = RunEpisode(*env, **expert, TaskInstance{(*factory)->task_name(), 5}, 100);
    ASSERT_TRUE(summary.ok()) << summary.status();
    EXPECT_EQ(summary->total_reward, 1.0) << (*factory)->DebugString();
    EXPECT_TRUE((*factory)->MakeRandom(1).ok());
  }
}

TEST(EnvFactoryTest, LatencyWrapsOnlyWhenConfigured) {
  EnvOptions options;
  auto plain = EnvFactory::Create(options);
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT((*plain)->DebugString(), ::testing::Not(HasSubstr("latency")));
  options.latency = testing::Latency(LatencyKind::kPareto, 200, 1, 1.5);
  auto wrapped = EnvFactory::Create(options);
  ASSERT_TRUE(wrapped.ok());
  EXPECT_THAT((*wrapped)->DebugString(), HasSubstr("latency pareto(mean=200ms, alpha=1.5)"));
  auto env = (*wrapped)->NewEnvironment();
  auto first = env->Reset(TaskInstance{"guess", 1});
  ASSERT_TRUE(first.ok());
  EXPECT_GT(first->latency, absl::ZeroDuration());
}

TEST(EnvFactoryTest, ProcessEnvironmentWithLatencyThroughTheExecutor) {
  EnvOptions options;
  options.kind = EnvKind::kProcess;
  options.process.command = {"python3", testing::SourcePath("examples/envs/guess_env.py")};
  options.process.copies = 2;
  options.latency = testing::Latency(LatencyKind::kConstant, 30);
  auto factory = EnvFactory::Create(options);
  ASSERT_TRUE(factory.ok()) << factory.status();
  EXPECT_EQ((*factory)->task_name(), "guess");
  EXPECT_EQ((*factory)->vocabulary().words.size(), 21u);
  EXPECT_FALSE((*factory)->MakeExpert().ok());
  auto random = (*factory)->MakeRandom(1);
  ASSERT_TRUE(random.ok()) << random.status();
  {
    auto env = (*factory)->NewEnvironment();
    auto summary = RunEpisode(*env, **random, TaskInstance{"guess", 1}, 100);
    ASSERT_TRUE(summary.ok()) << summary.status();
    EXPECT_EQ(summary->end, EpisodeEnd::kDone);
  }
  EXPECT_THAT((*factory)->DebugString(), HasSubstr("process(guess: python3"));

  EnvExecutor executor({.num_workers = 2});
  auto env = (*factory)->NewEnvironment();
  auto first = executor.Reset(env.get(), TaskInstance{"guess", 4}).get();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->observation, "go");
  EXPECT_EQ(first->latency, absl::Milliseconds(30));
  auto step = executor.Step(env.get(), "8").get();
  ASSERT_TRUE(step.ok());
  // Budget expiry: the actor asks for the partial score through the executor too.
  std::promise<absl::StatusOr<double>> score;
  executor.StartScorePartial(env.get(), [&](absl::StatusOr<double> s) { score.set_value(s); });
  auto partial = score.get_future().get();
  ASSERT_TRUE(partial.ok()) << partial.status();
  EXPECT_EQ(*partial, *step->partial_score);
  env->Close();
}

TEST(EnvFactoryTest, BadOptionsNameTheKey) {
  EnvOptions options;
  options.kind = EnvKind::kProcess;
  EXPECT_THAT(EnvFactory::Create(options).status().message(), HasSubstr("env.process.command"));
  options = {};
  options.latency.model = LatencyKind::kPareto;
  options.latency.alpha = 1.0;
  EXPECT_THAT(EnvFactory::Create(options).status().message(), HasSubstr("env.latency.alpha"));
  options = {};
  options.tool_latency = testing::Latency(LatencyKind::kTrace, 0, 1, 1.5, "/nonexistent/t.txt");
  EXPECT_THAT(EnvFactory::Create(options).status().message(), HasSubstr("/nonexistent/t.txt"));
}

}  // namespace
}  // namespace flywheel
