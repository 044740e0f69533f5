#include "flywheel/runtime/warm_start.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/runtime/embedded_job.h"
#include "flywheel/runtime/job_test_util.h"
#include "flywheel/runtime/policy_setup.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

struct SftJob {
  JobConfig config;
  std::unique_ptr<EnvFactory> factory;
  PolicyText text;
  Transformer model{nullptr};
};

SftJob Make(const std::string& name, std::vector<std::string> overrides) {
  SftJob s;
  absl::StatusOr<JobConfig> config = testing::LoadGuessJob(name, overrides);
  EXPECT_TRUE(config.ok()) << config.status();
  s.config = *config;
  auto factory = EnvFactory::Create(s.config.env);
  EXPECT_TRUE(factory.ok()) << factory.status();
  s.factory = *std::move(factory);
  auto text = MakePolicyText(s.config, *s.factory);
  EXPECT_TRUE(text.ok()) << text.status();
  s.text = *std::move(text);
  auto options = ResolveModelOptions(s.config, *s.text.tokenizer, s.text.tokenizer_name);
  EXPECT_TRUE(options.ok()) << options.status();
  auto model = MakeInitialModel(*options);
  EXPECT_TRUE(model.ok()) << model.status();
  s.model = *model;
  return s;
}

TEST(WarmStartTest, ExpertEpisodesAreLaidOutAsAnActorLaysOutThePolicys) {
  SftJob s = Make("sft_layout", {});
  auto trajectories = ExpertTrajectories(s.config, *s.factory, s.text, 5, 8);
  ASSERT_TRUE(trajectories.ok()) << trajectories.status();
  ASSERT_EQ(trajectories->size(), 8u);
  const std::vector<int64_t>& stops = s.text.turn_format->stop_tokens();
  for (const Trajectory& t : *trajectories) {
    EXPECT_TRUE(t.Validate(s.text.tokenizer->vocab_size()).ok()) << t.DebugString();
    EXPECT_GT(t.NumTrainable(), 0);
    EXPECT_GT(t.final_reward, 0.5f) << "the expert solves guess";  // reward 1 on a hit
    ASSERT_FALSE(t.turn_ends.empty());
    // guess's turns are one word (actor.max_new_tokens = 1): cut by length, no stop token.
    for (int32_t end : t.turn_ends) {
      EXPECT_NE(t.tokens[end - 1], stops.front());
      EXPECT_TRUE(t.trainable[end - 1]);
      EXPECT_FALSE(t.trainable[end - 2]);
    }
    EXPECT_FALSE(t.trainable[0]);  // the task's prompt is the environment's
  }
}

TEST(WarmStartTest, TrainingOnTheExpertRaisesItsLikelihood) {
  SftJob s = Make("sft_nll", {"sft.steps=20", "sft.episodes_per_step=32", "sft.lr=3e-3"});
  absl::StatusOr<WarmStartResult> result =
      SupervisedWarmStart(s.config, *s.factory, s.text, s.model);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 20);
  EXPECT_EQ(result->episodes, 640);
  std::printf("sft on guess: expert-token NLL %.3f -> %.3f\n", result->first_nll,
              result->last_nll);
  // Each step's episodes are new: the drop is learning the expert, not memorising a batch.
  EXPECT_LT(result->last_nll, 0.6 * result->first_nll);  // measured 3.24 -> 1.47
  for (const auto& p : s.model->parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat32);
}

TEST(WarmStartTest, AJobWarmStartsOnceAndAResumedRunDoesNot) {
  const std::vector<std::string> overrides = {
      "sft.steps=2", "sft.episodes_per_step=8", "run.max_steps=2", "run.batch_groups=4",
      "buffer.max_size=8", "actor.episodes_in_flight=32", "learner.checkpoint_every=2"};
  absl::StatusOr<JobConfig> config = testing::LoadGuessJob("sft_job", overrides);
  ASSERT_TRUE(config.ok()) << config.status();
  EmbeddedJobOptions options;
  options.progress = nullptr;
  absl::StatusOr<EmbeddedJobResult> first = RunEmbeddedJob(*config, options);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->summary.contains("sft")) << first->summary;
  EXPECT_EQ(first->summary["sft"]["steps"], 2);
  EXPECT_EQ(first->summary["sft"]["episodes"], 16);
  JobConfig more = *config;
  more.run.max_steps = 3;
  options.resume = true;
  absl::StatusOr<EmbeddedJobResult> resumed = RunEmbeddedJob(more, options);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->final_step, 3);
  EXPECT_FALSE(resumed->summary.contains("sft")) << "the checkpoint holds weights trained after it";
}

TEST(WarmStartTest, TheRunsBudgetEndsTheWarmStartEarlyAndTheJobStillWritesItsSummary) {
  // 0.3 s of budget against 100 000 steps: the job stops inside the warm start and reports it.
  absl::StatusOr<JobConfig> config = testing::LoadGuessJob(
      "sft_budget", {"sft.steps=100000", "sft.episodes_per_step=8", "run.max_wall_seconds=0.3"});
  ASSERT_TRUE(config.ok()) << config.status();
  EmbeddedJobOptions options;
  options.progress = nullptr;
  absl::StatusOr<EmbeddedJobResult> result = RunEmbeddedJob(*config, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->summary["sft"]["stopped"].get<bool>()) << result->summary;
  EXPECT_LT(result->summary["sft"]["steps"].get<int64_t>(), 100000);
  EXPECT_EQ(result->summary["stopped_by"], "max_wall_seconds");
}

TEST(WarmStartTest, BadSettingsAreClearErrors) {
  absl::StatusOr<JobConfig> source = testing::LoadGuessJob("sft_bad", {"sft.source=\"jsonl\""});
  ASSERT_FALSE(source.ok());
  EXPECT_THAT(source.status().message(), HasSubstr("sft.source = \"jsonl\""));
  absl::StatusOr<JobConfig> group =
      testing::LoadGuessJob("sft_bad", {"sft.steps=3", "learner.world_size=2"});
  ASSERT_FALSE(group.ok());
  EXPECT_THAT(group.status().message(), HasSubstr("learner.world_size = 1"));
  absl::StatusOr<JobConfig> negative = testing::LoadGuessJob("sft_bad", {"sft.steps=-1"});
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(negative.status().message(), HasSubstr("sft.steps must be >= 0"));
}

}  // namespace
}  // namespace flywheel
