#include "flywheel/learner/learner_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/core/config.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

absl::Status BindText(std::string_view text, LearnerOptions& options) {
  auto table = config::ParseToml(text, "test.toml");
  if (!table.ok()) return table.status();
  absl::Status s = config::Bind(*table, "test.toml", options);
  if (!s.ok()) return s;
  return options.Validate();
}

TEST(LearnerOptionsTest, DefaultsValidate) { EXPECT_TRUE(LearnerOptions{}.Validate().ok()); }

TEST(LearnerOptionsTest, BindsEveryKind) {
  LearnerOptions o;
  ASSERT_TRUE(BindText(R"(loss = "ppo_clip"
aggregation = "execution_mean"
advantage = "grpo_no_std"
buckets = [128, 512]
token_budget = 1024
too_long = "drop"
world_size = 4
sharding = "grads_optimizer"
grad_bucket_mb = 1.5
)",
                       o)
                  .ok());
  EXPECT_EQ(o.loss, PolicyLossKind::kPpoClip);
  EXPECT_EQ(o.aggregation, LossAggregation::kExecutionMean);
  EXPECT_EQ(o.advantage, AdvantageKind::kGrpoNoStd);
  EXPECT_EQ(o.buckets, (std::vector<int64_t>{128, 512}));
  EXPECT_EQ(o.too_long, TooLongPolicy::kDrop);
  EXPECT_EQ(o.world_size, 4);
  EXPECT_EQ(o.sharding, ShardingMode::kGradsOptimizer);
  EXPECT_DOUBLE_EQ(o.grad_bucket_mb, 1.5);
}

TEST(LearnerOptionsTest, RejectsBadValuesNamingTheKey) {
  LearnerOptions o;
  EXPECT_THAT(BindText("buckets = [512, 256]", o).message(), HasSubstr("ascending"));
  o = {};
  EXPECT_THAT(BindText("token_budget = 100", o).message(), HasSubstr("learner.token_budget"));
  o = {};
  EXPECT_THAT(BindText("clip_eps = 1.5", o).message(), HasSubstr("learner.clip_eps"));
  o = {};
  EXPECT_THAT(BindText("loss = \"vtrace\"", o).message(), HasSubstr("vtrace"));
  o = {};
  EXPECT_THAT(BindText("warmup_steps = 10\ntotal_steps = 5", o).message(),
              HasSubstr("warmup_steps"));
  o = {};
  EXPECT_THAT(BindText("loss = \"ppo\"", o).message(), HasSubstr("ppo_clip"));
  o = {};
  EXPECT_THAT(BindText("world_size = 0", o).message(), HasSubstr("learner.world_size"));
  o = {};
  EXPECT_THAT(BindText("grad_bucket_mb = 0", o).message(), HasSubstr("learner.grad_bucket_mb"));
  o = {};
  EXPECT_THAT(BindText("sharding = \"zero3\"", o).message(), HasSubstr("grads_optimizer"));
  o = {};
  EXPECT_THAT(BindText("tensor_parallel = 0", o).message(), HasSubstr("learner.tensor_parallel"));
  o = {};
  EXPECT_THAT(BindText("world_size = 6\ntensor_parallel = 4", o).message(),
              HasSubstr("learner.tensor_parallel (4) must divide learner.world_size (6)"));
  o = {};
  EXPECT_THAT(BindText("world_size = 4\ntensor_parallel = 2\nsharding = \"full\"", o).message(),
              HasSubstr("learner.sharding"));
  o = {};
  EXPECT_TRUE(BindText("world_size = 4\ntensor_parallel = 2", o).ok());
  EXPECT_EQ(o.tensor_parallel, 2);
}

}  // namespace
}  // namespace flywheel
