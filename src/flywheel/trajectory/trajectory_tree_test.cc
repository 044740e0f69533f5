#include "flywheel/trajectory/trajectory_tree.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/trajectory/path_selection.h"

namespace flywheel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

LlmCall Call(std::string id, Role role, std::vector<int32_t> context,
             std::vector<int32_t> generated, int64_t start = 0) {
  LlmCall c;
  c.call_id = std::move(id);
  c.role = role;
  c.context = std::move(context);
  c.generated = std::move(generated);
  c.logprobs.assign(c.generated.size(), -0.5f);
  c.versions.assign(c.generated.size(), 3);
  c.start_unix_ns = start;
  return c;
}

Execution Exec(std::vector<LlmCall> calls) {
  Execution e;
  e.execution_id = "e1";
  e.calls = std::move(calls);
  e.final_reward = 1.0f;
  return e;
}

std::vector<std::string> Ids(const std::vector<TreePath>& paths) {
  std::vector<std::string> ids;
  for (const auto& p : paths) ids.push_back(p.id);
  return ids;
}

TEST(TrajectoryTreeTest, SharedPrefixIsStoredOnce) {
  // a retry from an earlier point: both calls share the prompt [1 2 3]
  auto tree = TrajectoryTree::FromExecution(
      Exec({Call("a", Role::kMain, {1, 2, 3}, {10, 11}), Call("b", Role::kMain, {1, 2, 3}, {20})}));
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_EQ(tree->NumNodes(), 3 + 2 + 1);
  EXPECT_EQ(tree->NumPathTokens(), 5 + 4);
  EXPECT_THAT(Ids(tree->Paths()), ElementsAre("a", "b"));
  const auto nodes = tree->PathNodes(tree->Paths()[1]);
  ASSERT_EQ(nodes.size(), 4u);
  EXPECT_EQ(tree->nodes()[nodes[3]].token, 20);
  EXPECT_EQ(tree->nodes()[nodes[3]].depth, 3);
  EXPECT_EQ(tree->nodes()[nodes[3]].parent, nodes[2]);
}

TEST(TrajectoryTreeTest, IdenticalPathsAreDeduplicatedKeepingTheHigherRole) {
  auto tree = TrajectoryTree::FromExecution(Exec({Call("a", Role::kSubAgent, {1, 2}, {5}),
                                                  Call("b", Role::kMain, {1, 2}, {5}),
                                                  Call("c", Role::kMain, {1, 2}, {6})}));
  ASSERT_TRUE(tree.ok());
  const auto paths = tree->Paths();
  ASSERT_THAT(Ids(paths), ElementsAre("a", "c"));
  EXPECT_EQ(paths[0].role, Role::kMain);
  EXPECT_THAT(paths[0].duplicate_ids, ElementsAre("b"));
}

TEST(TrajectoryTreeTest, EarlierTurnsAreAbsorbedIntoTheLaterCall) {
  // turn 2's context is turn 1's context + generated + tool output [9]
  auto tree = TrajectoryTree::FromExecution(Exec({Call("t1", Role::kMain, {1, 2}, {5, 6}),
                                                  Call("t2", Role::kMain, {1, 2, 5, 6, 9}, {7})}));
  ASSERT_TRUE(tree.ok());
  const auto paths = tree->Paths();
  ASSERT_THAT(Ids(paths), ElementsAre("t2"));
  EXPECT_THAT(paths[0].absorbed_ids, ElementsAre("t1"));
  // turn 1's generated tokens stay trainable inside turn 2's path; the tool output does not
  std::vector<bool> trainable;
  for (int32_t n : tree->PathNodes(paths[0])) trainable.push_back(tree->nodes()[n].trainable);
  EXPECT_THAT(trainable, ElementsAre(false, false, true, true, false, true));
}

TEST(TrajectoryTreeTest, PrefixOfAnotherRoleIsNotAbsorbed) {
  auto tree = TrajectoryTree::FromExecution(Exec(
      {Call("main", Role::kMain, {1}, {5}), Call("sub", Role::kSubAgent, {1, 5, 8}, {9})}));
  ASSERT_TRUE(tree.ok());
  EXPECT_THAT(Ids(tree->Paths()), ElementsAre("main", "sub"));
}

TEST(TrajectoryTreeTest, ContextRepeatingGeneratedTextIsNotTrainable) {
  // The policy generated [7 8] after [1 2]. A summary call quotes "7 8" in its own context
  // after [1 3]: the same text at another prefix is an observation there.
  auto tree = TrajectoryTree::FromExecution(
      Exec({Call("gen", Role::kMain, {1, 2}, {7, 8}),
            Call("summary", Role::kMainSummary, {1, 3, 7, 8}, {4})}));
  ASSERT_TRUE(tree.ok());
  const auto paths = tree->Paths();
  ASSERT_EQ(paths.size(), 2u);
  std::vector<bool> summary_trainable;
  for (int32_t n : tree->PathNodes(paths[1])) {
    summary_trainable.push_back(tree->nodes()[n].trainable);
  }
  EXPECT_THAT(summary_trainable, ElementsAre(false, false, false, false, true));
  std::vector<bool> gen_trainable;
  for (int32_t n : tree->PathNodes(paths[0])) gen_trainable.push_back(tree->nodes()[n].trainable);
  EXPECT_THAT(gen_trainable, ElementsAre(false, false, true, true));
}

TEST(TrajectoryTreeTest, BuildsFromActorTrajectories) {
  Trajectory a;
  a.id = "p0";
  a.execution_id = "e9";
  a.AppendPrompt(1);
  a.AppendGenerated(4, -0.1f, 2);
  Trajectory b = a;
  b.id = "p1";
  b.parent_id = "p0";
  b.fork_position = 1;
  b.tokens[1] = 6;
  auto tree = TrajectoryTree::FromTrajectories(std::vector<Trajectory>{a, b});
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_EQ(tree->NumNodes(), 3);
  b.execution_id = "other";
  auto bad = TrajectoryTree::FromTrajectories(std::vector<Trajectory>{a, b});
  EXPECT_THAT(bad.status().message(), HasSubstr("belongs to execution 'other'"));
}

TEST(PathSelectionTest, RolePriorityThenTimeUpToJMax) {
  auto tree = TrajectoryTree::FromExecution(
      Exec({Call("sub-summary", Role::kSubAgentSummary, {1}, {2}, 1),
            Call("sub", Role::kSubAgent, {1}, {3}, 2), Call("main-late", Role::kMain, {1}, {4}, 9),
            Call("summary", Role::kMainSummary, {1}, {5}, 3),
            Call("main-early", Role::kMain, {1}, {6}, 4)}));
  ASSERT_TRUE(tree.ok());
  PathSelection all = SelectPaths(tree->Paths(), 0);
  EXPECT_THAT(Ids(all.selected),
              ElementsAre("main-early", "main-late", "summary", "sub", "sub-summary"));
  PathSelection capped = SelectPaths(tree->Paths(), 3);
  EXPECT_THAT(Ids(capped.selected), ElementsAre("main-early", "main-late", "summary"));
  EXPECT_THAT(Ids(capped.dropped), ElementsAre("sub", "sub-summary"));
  EXPECT_EQ(capped.selected_per_role[0], 2);
  EXPECT_EQ(capped.dropped_per_role[static_cast<int>(Role::kSubAgent)], 1);
  EXPECT_THAT(capped.DebugString(), HasSubstr("selected 3 dropped 2"));
  EXPECT_EQ(SelectPaths(tree->Paths(), 1).selected.size(), 1u);
}

TEST(ExecutionRewardTest, TimeoutKeepsThePartialScore) {
  Execution e = Exec({Call("a", Role::kMain, {1}, {2})});
  e.final_reward.reset();
  e.termination = Termination::kTimeout;
  e.partial_score = 0.4f;
  auto r = RewardOf(e);
  ASSERT_TRUE(r.ok());
  EXPECT_FLOAT_EQ(r->reward, 0.4f);
  EXPECT_TRUE(r->from_partial_score);

  e.partial_score.reset();
  auto missing = RewardOf(e);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.status().message(), HasSubstr("without a partial score"));

  e.termination = Termination::kDone;
  e.final_reward = 1.0f;
  EXPECT_FALSE(RewardOf(e)->from_partial_score);
}

TEST(LlmCallTest, BehaviourVersionsSpanEveryGeneratedToken) {
  EXPECT_EQ(BehaviourVersions({}).min, 0);
  EXPECT_EQ(BehaviourVersions({}).max, 0);
  Execution a = Exec({Call("a0", Role::kMain, {1}, {2, 3})});
  a.calls[0].versions = {7, 9};
  Execution b = Exec({Call("b0", Role::kMain, {1}, {2}), Call("b1", Role::kSubAgent, {1}, {4})});
  b.calls[1].versions = {12};
  const VersionRange r = BehaviourVersions({a, b});
  EXPECT_EQ(r.min, 3);  // b0 keeps Call's version 3
  EXPECT_EQ(r.max, 12);
}

TEST(LlmCallTest, ValidationNamesExecutionAndCall) {
  Execution e = Exec({Call("c7", Role::kMain, {1}, {2, 3})});
  e.calls[0].logprobs.pop_back();
  EXPECT_THAT(e.Validate().message(), HasSubstr("execution 'e1' call 'c7'"));
  e = Exec({Call("c7", Role::kMain, {1}, {2})});
  e.calls[0].logprobs[0] = 0.5f;
  EXPECT_THAT(e.Validate().message(), HasSubstr("logprobs[0]"));
  e = Exec({Call("c7", Role::kMain, {1, 99}, {2})});
  EXPECT_THAT(e.Validate(50).message(), HasSubstr("context[1]"));
}

}  // namespace
}  // namespace flywheel
