#include "flywheel/trajectory/execution_record.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/core/trajectory_proto.h"
#include "flywheel/trajectory/random_execution_testing.h"
#include "flywheel/trajectory/trajectory_tree.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

// What the learner reads of an execution: calls in order with roles, tokens, log μ, versions.
void ExpectSameCalls(const Execution& a, const Execution& b) {
  ASSERT_EQ(a.calls.size(), b.calls.size());
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].call_id, b.calls[i].call_id);
    EXPECT_EQ(a.calls[i].role, b.calls[i].role);
    EXPECT_EQ(a.calls[i].context, b.calls[i].context);
    EXPECT_EQ(a.calls[i].generated, b.calls[i].generated);
    EXPECT_EQ(a.calls[i].logprobs, b.calls[i].logprobs);
    EXPECT_EQ(a.calls[i].versions, b.calls[i].versions);
  }
}

TEST(ExecutionRecordTest, RoundTripKeepsCallsRewardAndTree) {
  std::mt19937 rng(7);
  for (int n = 0; n < 20; ++n) {
    Execution e = testing::RandomExecution(rng, "exec-" + std::to_string(n), 4 + n % 5);
    e.group_id = "instance-3";
    e.task_id = "repair/3";
    e.env_name = "repair";
    if (n % 3 == 1) {  // timed out: trains on its partial score
      e.termination = Termination::kTimeout;
      e.final_reward.reset();
      e.partial_score = 0.25f;
    }
    absl::StatusOr<Trajectory> t = ExecutionToTrajectory(e, "actor-1");
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->id, e.execution_id);
    EXPECT_EQ(t->group_id, "instance-3");
    EXPECT_EQ(t->actor_id, "actor-1");
    EXPECT_EQ(t->call_roles.size(), e.calls.size());
    // Through the wire format too: what a remote actor's insert carries.
    absl::StatusOr<Trajectory> wire = FromProto(ToProto(*t));
    ASSERT_TRUE(wire.ok()) << wire.status();
    EXPECT_EQ(*wire, *t);

    absl::StatusOr<Execution> back = TrajectoryToExecution(*wire);
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectSameCalls(*back, e);
    EXPECT_EQ(back->group_id, e.group_id);
    EXPECT_EQ(back->termination, e.termination);
    EXPECT_EQ(RewardOf(*back)->reward, RewardOf(e)->reward);
    EXPECT_EQ(RewardOf(*back)->from_partial_score, RewardOf(e)->from_partial_score);

    absl::StatusOr<TrajectoryTree> want = TrajectoryTree::FromExecution(e);
    absl::StatusOr<TrajectoryTree> got = TrajectoryTree::FromExecution(*back);
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_EQ(got->NumNodes(), want->NumNodes());
    ASSERT_EQ(got->Paths().size(), want->Paths().size());
    for (size_t p = 0; p < want->Paths().size(); ++p) {
      EXPECT_EQ(got->Paths()[p].id, want->Paths()[p].id);
      EXPECT_EQ(got->Paths()[p].leaf, want->Paths()[p].leaf);
    }
  }
}

TEST(ExecutionRecordTest, RefusesAPlainPath) {
  Trajectory t;
  t.id = "path-1";
  t.AppendPrompt(1);
  t.AppendGenerated(2, -0.5f, 0);
  absl::StatusOr<Execution> e = TrajectoryToExecution(t);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("'path-1' is a plain path"));
}

TEST(ExecutionRecordTest, RefusesContextAfterGeneratedTokensInOneCall) {
  Execution e;
  e.execution_id = "exec-1";
  e.final_reward = 1.0f;
  e.calls.push_back(testing::MakeCall("exec-1-0", Role::kMain, {0, 5}, {6, 7}));
  absl::StatusOr<Trajectory> t = ExecutionToTrajectory(e, "actor-0");
  ASSERT_TRUE(t.ok()) << t.status();
  t->trainable[1] = 1;  // the context's second token now looks generated
  t->logprobs[1] = -1.0f;
  t->versions[1] = 3;
  t->trainable[2] = 0;  // and a generated one looks like context
  absl::StatusOr<Execution> back = TrajectoryToExecution(*t);
  ASSERT_FALSE(back.ok());
  EXPECT_THAT(back.status().message(), HasSubstr("call 0: context token at index 2"));
}

TEST(ExecutionRecordTest, RefusesAnExecutionWithoutAReward) {
  Execution e;
  e.execution_id = "exec-2";
  e.termination = Termination::kMaxTurns;
  e.calls.push_back(testing::MakeCall("exec-2-0", Role::kMain, {0, 5}, {6}));
  absl::StatusOr<Trajectory> t = ExecutionToTrajectory(e, "actor-0");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("neither a final reward nor a partial score"));
}

}  // namespace
}  // namespace flywheel
