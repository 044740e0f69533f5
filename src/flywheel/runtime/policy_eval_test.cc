#include "flywheel/runtime/policy_eval.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "flywheel/runtime/policy_text.h"
#include "flywheel/runtime/embedded_job.h"
#include "flywheel/runtime/job_test_util.h"
#include "flywheel/runtime/learner_session.h"
#include "flywheel/runtime/policy_setup.h"

namespace flywheel {
namespace {

// The guess job's environment, tokenizer and freshly initialised weights.
struct Policy {
  JobConfig config;
  std::unique_ptr<EnvFactory> factory;
  PolicyText text;
  std::shared_ptr<const WeightSnapshot> weights;
};

Policy MakePolicy(const std::string& name, int64_t seed) {
  Policy p;
  absl::StatusOr<JobConfig> config =
      testing::LoadGuessJob(name, {"actor.episodes_in_flight=16", StrCat("run.seed=", seed)});
  EXPECT_TRUE(config.ok()) << config.status();
  p.config = *config;
  p.factory = *EnvFactory::Create(p.config.env);
  p.text = *MakePolicyText(p.config, *p.factory);
  absl::StatusOr<ModelOptions> model =
      ResolveModelOptions(p.config, *p.text.tokenizer, p.text.tokenizer_name);
  EXPECT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::unique_ptr<LearnerSession>> session =
      LearnerSession::Open(p.config, *model, /*resume=*/false);
  EXPECT_TRUE(session.ok()) << session.status();
  p.weights = *(*session)->Snapshot();
  return p;
}

absl::StatusOr<PolicyEvalResult> Evaluate(const Policy& p, int64_t episodes, uint64_t seed) {
  return EvaluatePolicy(p.config, *p.factory, p.text, p.weights, episodes, seed);
}

TEST(PolicyEvalTest, SameSeedPlaysTheSameEpisodes) {
  const Policy p = MakePolicy("eval_same", 1);
  absl::StatusOr<PolicyEvalResult> a = Evaluate(p, 48, 7);
  absl::StatusOr<PolicyEvalResult> b = Evaluate(p, 48, 7);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->episodes, 48);
  EXPECT_EQ(a->version, p.weights->version);
  // Tasks and sampling seeds depend on the seed and the episode index only, not on which
  // episode finished first.
  EXPECT_EQ(a->reward_mean, b->reward_mean);
  EXPECT_EQ(a->success_rate, b->success_rate);
  EXPECT_GT(a->reward_stderr, 0.0);
  EXPECT_GE(a->success_rate, 0.0);
  EXPECT_LE(a->success_rate, 1.0);
}

TEST(PolicyEvalTest, DifferentWeightsOnTheSameEpisodesGiveDifferentRewards) {
  // Two random initialisations play the same 64 tasks differently.
  const Policy a = MakePolicy("eval_a", 1);
  const Policy b = MakePolicy("eval_b", 2);
  absl::StatusOr<PolicyEvalResult> ra = Evaluate(a, 64, 3);
  absl::StatusOr<PolicyEvalResult> rb = Evaluate(b, 64, 3);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_NE(ra->reward_mean, rb->reward_mean);
}

TEST(PolicyEvalTest, RejectsNoEpisodesAndNoWeights) {
  Policy p = MakePolicy("eval_bad", 1);
  EXPECT_EQ(Evaluate(p, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  p.weights = nullptr;
  EXPECT_EQ(Evaluate(p, 4, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PolicyEvalTest, JobEvaluatesItsFinalPolicyIntoTheSummary) {
  absl::StatusOr<JobConfig> config = testing::LoadGuessJob(
      "eval_job", {"run.batch_groups=2", "buffer.max_size=4", "actor.episodes_in_flight=16",
                   "run.max_steps=2", "run.eval_episodes=24"});
  ASSERT_TRUE(config.ok()) << config.status();
  EmbeddedJobOptions options;
  options.progress = nullptr;
  absl::StatusOr<EmbeddedJobResult> result = RunEmbeddedJob(*config, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->eval.has_value());
  EXPECT_EQ(result->eval->episodes, 24);
  EXPECT_EQ(result->eval->version, 2);  // the weights after the last step
  EXPECT_EQ(result->summary["eval"]["episodes"].get<int64_t>(), 24);
}

}  // namespace
}  // namespace flywheel
