#include "flywheel/runtime/harness_eval.h"

#include <gtest/gtest.h>

#include "flywheel/model/test_util.h"
#include "flywheel/model/weight_snapshot.h"

namespace flywheel {
namespace {

struct HarnessEvalSetup {
  RepairHarnessOptions harness;
  std::shared_ptr<const WeightSnapshot> weights;
};

// The tiny test model over the harness's vocabulary (3-line programs, one retry), version 5.
HarnessEvalSetup TinyHarnessPolicy() {
  HarnessEvalSetup s;
  s.harness.repair.num_lines = 3;
  s.harness.repair.num_bugs = 1;
  s.harness.max_retries = 1;
  ModelOptions mo = testing::TinyModelOptions(3);
  mo.vocab_size = (*MakeRepairHarnessTokenizer(s.harness.repair))->vocab_size();
  mo.max_seq_len = 512;
  s.weights = *MakeSnapshot(*MakeTransformer(mo), /*version=*/5);
  return s;
}

absl::StatusOr<PolicyEvalResult> Evaluate(const HarnessEvalSetup& s, int64_t executions,
                                          uint64_t seed) {
  EngineHarnessPolicyOptions po;
  po.max_new_tokens = 8;
  return EvaluateHarnessPolicy(s.harness, RolloutEngineOptions{}, po, s.weights, executions, seed,
                               /*success_reward=*/1.0);
}

TEST(HarnessEvalTest, TheSameSeedPlaysTheSameInstancesWithTheSameDraws) {
  const HarnessEvalSetup s = TinyHarnessPolicy();
  absl::StatusOr<PolicyEvalResult> a = Evaluate(s, 6, 11);
  absl::StatusOr<PolicyEvalResult> b = Evaluate(s, 6, 11);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->episodes, 6);
  EXPECT_EQ(a->version, 5);
  EXPECT_EQ(a->reward_mean, b->reward_mean);
  EXPECT_EQ(a->reward_stderr, b->reward_stderr);
  EXPECT_EQ(a->success_rate, b->success_rate);
  EXPECT_GE(a->reward_mean, 0.0);
  EXPECT_LE(a->success_rate, 1.0);
}

TEST(HarnessEvalTest, RejectsNoExecutionsAndNoWeights) {
  HarnessEvalSetup s = TinyHarnessPolicy();
  absl::StatusOr<PolicyEvalResult> none = Evaluate(s, 0, 1);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find(">= 1 execution"), std::string::npos) << none.status();
  s.weights = nullptr;
  absl::StatusOr<PolicyEvalResult> no_weights = Evaluate(s, 2, 1);
  ASSERT_FALSE(no_weights.ok());
  EXPECT_NE(no_weights.status().message().find("weights"), std::string::npos);
}

}  // namespace
}  // namespace flywheel
