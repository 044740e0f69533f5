#include "flywheel/actor/engine_harness_policy.h"

#include <gtest/gtest.h>

#include <iostream>
#include <set>

#include "flywheel/model/attention_layout.h"
#include "flywheel/model/test_util.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/trajectory/repair_harness.h"

namespace flywheel {
namespace {

// The tiny test model over the harness's vocabulary, long enough for its contexts.
ModelOptions HarnessModel(const RepairHarnessOptions& harness) {
  ModelOptions o = testing::TinyModelOptions(5);
  o.vocab_size = (*MakeRepairHarnessTokenizer(harness.repair))->vocab_size();
  o.max_seq_len = 512;
  return o;
}

// log π of each generated token of `call` under `model`: the learner's view (one causal forward
// of context + generated).
std::vector<float> LearnerLogprobs(const Transformer& model, const LlmCall& call,
                                   const SamplingParams& sampling) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> tokens(call.context.begin(), call.context.end());
  tokens.insert(tokens.end(), call.generated.begin(), call.generated.end());
  const int64_t n = static_cast<int64_t>(tokens.size());
  const auto t = torch::tensor(tokens, torch::kInt64).unsqueeze(0);
  const auto logits = model->forward(t, CausalLayout(1, n));
  const int64_t g = static_cast<int64_t>(call.generated.size());
  const torch::Tensor lp =
      TokenLogprobs(logits.narrow(1, n - g - 1, g), t.narrow(1, n - g, g), sampling)[0];
  return std::vector<float>(lp.data_ptr<float>(), lp.data_ptr<float>() + g);
}

TEST(EngineHarnessPolicyTest, RecordsTheEnginesLogprobsAndVersions) {
  RepairHarnessOptions harness;
  harness.max_retries = 1;
  const ModelOptions mo = HarnessModel(harness);
  Transformer learner = *MakeTransformer(mo);
  auto snapshot = MakeSnapshot(*MakeTransformer(mo), /*version=*/7);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  auto engine = RolloutEngine::Create(RolloutEngineOptions{}, *snapshot);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EngineHarnessPolicyOptions po;
  po.sampling.temperature = 0.9;
  po.max_new_tokens = 8;
  EngineHarnessPolicy policy(engine->get(), po);

  absl::StatusOr<Execution> e = RunRepairHarness(harness, 3, policy, "repair-3-0");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->execution_id, "repair-3-0");
  EXPECT_EQ(e->group_id, "repair-3");
  ASSERT_TRUE(e->Validate(mo.vocab_size).ok());
  ASSERT_GE(e->calls.size(), 4u);
  EXPECT_EQ(policy.calls(), static_cast<int64_t>(e->calls.size()));
  std::set<Role> roles;
  double max_diff = 0;
  for (const LlmCall& call : e->calls) {
    roles.insert(call.role);
    ASSERT_LE(call.generated.size(), 8u);
    for (int64_t v : call.versions) EXPECT_EQ(v, 7);
    const std::vector<float> learner_lp = LearnerLogprobs(learner, call, po.sampling);
    for (size_t i = 0; i < learner_lp.size(); ++i) {
      max_diff = std::max<double>(max_diff, std::abs(learner_lp[i] - call.logprobs[i]));
    }
  }
  std::cout << e->calls.size() << " calls, max |log μ − log π| " << max_diff << "\n";
  EXPECT_LT(max_diff, 1e-4);
  EXPECT_TRUE(roles.count(Role::kMain));
  EXPECT_TRUE(roles.count(Role::kSubAgent));  // the instance starts with failing tests
  // An untrained model writes mostly malformed actions; the environment answers "invalid" and
  // the agent goes on, and the execution still ends with a score.
  EXPECT_TRUE(e->final_reward.has_value() || e->partial_score.has_value());
}

TEST(EngineHarnessPolicyTest, LaterCallsUseAPublishedSnapshot) {
  RepairHarnessOptions harness;
  harness.max_retries = 0;
  const ModelOptions mo = HarnessModel(harness);
  auto engine =
      RolloutEngine::Create(RolloutEngineOptions{}, *MakeSnapshot(*MakeTransformer(mo), 0));
  ASSERT_TRUE(engine.ok());
  EngineHarnessPolicy policy(engine->get(), EngineHarnessPolicyOptions{});
  absl::StatusOr<Execution> before = RunRepairHarness(harness, 1, policy);
  ASSERT_TRUE(before.ok()) << before.status();
  (*engine)->PublishSnapshot(*MakeSnapshot(*MakeTransformer(mo), 3));
  absl::StatusOr<Execution> after = RunRepairHarness(harness, 1, policy);
  ASSERT_TRUE(after.ok()) << after.status();
  for (const LlmCall& c : before->calls) EXPECT_EQ(c.versions.front(), 0);
  for (const LlmCall& c : after->calls) EXPECT_EQ(c.versions.front(), 3);
}

TEST(EngineHarnessPolicyTest, AContextLongerThanTheModelIsAnErrorNamingTheCall) {
  RepairHarnessOptions harness;
  ModelOptions mo = HarnessModel(harness);
  mo.max_seq_len = 32;  // the first report alone is longer
  auto engine =
      RolloutEngine::Create(RolloutEngineOptions{}, *MakeSnapshot(*MakeTransformer(mo), 0));
  ASSERT_TRUE(engine.ok());
  EngineHarnessPolicy policy(engine->get(), EngineHarnessPolicyOptions{});
  absl::StatusOr<Execution> e = RunRepairHarness(harness, 1, policy);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("repair-1-0"), std::string::npos) << e.status();
  EXPECT_NE(e.status().message().find("max_seq_len"), std::string::npos) << e.status();
}

}  // namespace
}  // namespace flywheel
