#include "flywheel/learner/tree_learner.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "flywheel/model/test_util.h"
#include "flywheel/trajectory/repair_harness.h"

namespace flywheel {
namespace {

std::vector<Execution> ScriptedExecutions(int n, RepairHarnessOptions options = {}) {
  std::vector<Execution> out;
  for (int seed = 1; seed <= n; ++seed) {
    absl::StatusOr<Execution> e = RunRepairHarness(options, seed);
    EXPECT_TRUE(e.ok()) << e.status();
    out.push_back(*e);
  }
  return out;
}

// Every loss contribution is a token some call generated, at the prefix where it generated it:
// the path from the tree's root to the contribution's token, read off the packed row through
// the parent columns, equals a call's context + generated[0..i].
TEST(TreeLearnerTest, TheLossTrainsOnlyGeneratedTokens) {
  std::vector<Execution> executions = ScriptedExecutions(4);
  std::set<std::vector<int32_t>> generated_prefixes;
  for (const Execution& e : executions) {
    for (const LlmCall& c : e.calls) {
      std::vector<int32_t> path = c.context;
      for (int32_t t : c.generated) {
        path.push_back(t);
        generated_prefixes.insert(path);
      }
    }
  }
  // Two executions of one instance: with group packing they share a segment.
  executions[1].group_id = executions[0].group_id;
  for (TreePacking packing : {TreePacking::kGroup, TreePacking::kTree}) {
    for (TreeWeighting weighting : {TreeWeighting::kExact, TreeWeighting::kDedup}) {
      TreeLearnerOptions options;
      options.packing = packing;
      options.weighting = weighting;
      absl::StatusOr<TreeBatch> batch = PrepareTreeBatch(executions, options);
      ASSERT_TRUE(batch.ok()) << batch.status();
      const PackedTrees& p = batch->packed;
      ASSERT_FALSE(p.contributions.empty());
      std::set<std::vector<int32_t>> trained;
      for (const PackedTrees::Contribution& c : p.contributions) {
        std::vector<int32_t> path;
        for (int64_t col = c.col; col >= 0; col = p.parents[c.row][col]) {
          path.insert(path.begin(), p.tokens[p.Index(c.row, col)]);
        }
        EXPECT_TRUE(generated_prefixes.count(path)) << "row " << c.row << " col " << c.col;
        trained.insert(path);
      }
      // And nothing the policy generated is left out.
      EXPECT_EQ(trained, generated_prefixes);
      EXPECT_LT(batch->tokens_tree, batch->tokens_flat);
    }
  }
}

// Rows as long as the largest tree leave most of a row empty when trees differ in size; the
// batch takes a longer row where first-fit then fills it better.
TEST(TreeLearnerTest, RowsAreLongerWhereThatPadsLess) {
  const std::vector<Execution> executions = ScriptedExecutions(32);
  for (TreePacking packing : {TreePacking::kTree, TreePacking::kFlat}) {
    TreeLearnerOptions options;
    options.packing = packing;
    options.weighting = TreeWeighting::kExact;
    absl::StatusOr<TreeBatch> batch = PrepareTreeBatch(executions, options);
    ASSERT_TRUE(batch.ok()) << batch.status();
    const PackedTrees& p = batch->packed;
    int64_t largest = 0;  // the largest tree (flat: path), which every row must hold
    for (const TreeTrainingItem& item : batch->items) {
      if (packing == TreePacking::kTree)
        largest = std::max<int64_t>(largest, item.tree->NumNodes());
      for (const TreePath& path : item.paths) {
        if (packing == TreePacking::kFlat) largest = std::max<int64_t>(largest, path.length);
      }
    }
    // What rows of exactly the largest tree's length (rounded up) hold.
    const int64_t shortest =
        (largest + options.row_multiple - 1) / options.row_multiple * options.row_multiple;
    absl::StatusOr<PackedTrees> tight =
        packing == TreePacking::kTree
            ? PackTrees(batch->items, shortest, options.weighting, options.aggregation)
            : PackFlatPaths(batch->items, shortest, options.aggregation);
    ASSERT_TRUE(tight.ok()) << tight.status();
    EXPECT_EQ(p.length % options.row_multiple, 0);
    EXPECT_GT(p.length, shortest) << "scripted trees of mixed sizes pack tighter in longer rows";
    EXPECT_LT(p.rows * p.length, tight->rows * tight->length);
    EXPECT_EQ(p.real_tokens, tight->real_tokens);
    EXPECT_EQ(p.contributions.size(), tight->contributions.size());
  }
}

TEST(TreeLearnerTest, ExecutionsOfOneInstanceFormAGroup) {
  std::vector<Execution> executions = ScriptedExecutions(2);
  Execution twin = executions[0];  // same instance, another outcome
  twin.execution_id += "-b";
  twin.final_reward = 0.0f;
  executions[0].final_reward = 1.0f;
  Execution timed_out = executions[1];  // a group of two scored by partial progress
  timed_out.execution_id += "-b";
  timed_out.termination = Termination::kTimeout;
  timed_out.final_reward.reset();
  timed_out.partial_score = 0.25f;
  executions[1].final_reward = 0.75f;
  executions.push_back(twin);
  executions.push_back(timed_out);
  TreeLearnerOptions options;
  options.divide_by_std = false;
  absl::StatusOr<TreeBatch> batch = PrepareTreeBatch(executions, options);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_FLOAT_EQ(batch->execution_advantages[0], 0.5f);
  EXPECT_FLOAT_EQ(batch->execution_advantages[2], -0.5f);
  EXPECT_FLOAT_EQ(batch->execution_advantages[1], 0.25f);
  EXPECT_FLOAT_EQ(batch->execution_advantages[3], -0.25f);
  EXPECT_EQ(batch->partial_rewards, 1);
  for (size_t i = 0; i < batch->items.size(); ++i) {
    for (float a : batch->items[i].advantages) EXPECT_EQ(a, batch->execution_advantages[i]);
  }
  options.divide_by_std = true;
  batch = PrepareTreeBatch(executions, options);
  ASSERT_TRUE(batch.ok());
  EXPECT_NEAR(batch->execution_advantages[0], 1.0f, 1e-4);
}

TEST(TreeLearnerTest, AStepTrainsAndAdvancesTheVersion) {
  RepairHarnessOptions small;  // small trees: the test is about the step, not the workload
  small.max_retries = 1;
  small.max_subagents = 1;
  std::vector<Execution> executions = ScriptedExecutions(2, small);
  Execution twin = executions[0];
  twin.execution_id += "-b";
  twin.final_reward = 0.0f;
  executions.push_back(twin);
  ModelOptions mo = testing::TinyModelOptions();
  mo.vocab_size = (*MakeRepairHarnessTokenizer(RepairHarnessOptions{}.repair))->vocab_size();
  mo.max_seq_len = 512;
  Transformer model = *MakeTransformer(mo);
  const torch::Tensor before = model->parameters()[0].clone();
  OptimizerOptions oo;
  oo.schedule.lr = 1e-3;
  oo.schedule.total_steps = 10;
  for (PolicyLossKind kind :
       {PolicyLossKind::kPpoClip, PolicyLossKind::kTruncatedIs, PolicyLossKind::kDecoupledPpo}) {
    TreeLearnerOptions options;
    options.loss.kind = kind;
    TreeLearner learner(model, options, oo, 4);
    absl::StatusOr<TreeStepResult> r = learner.Step(executions);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(learner.version(), 5);
    EXPECT_TRUE(std::isfinite(r->loss));
    EXPECT_GT(r->contributions, 0);
    EXPECT_GT(r->tokens_flat, r->tokens_tree);
  }
  EXPECT_FALSE(torch::equal(before, model->parameters()[0]));
  // Imitation raises the likelihood of the generated tokens.
  TreeLearner imitate(model, TreeLearnerOptions{}, oo);
  absl::StatusOr<TreeStepResult> first = imitate.ImitationStep(executions);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<TreeStepResult> later;
  for (int i = 0; i < 3; ++i) later = imitate.ImitationStep(executions);
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_LT(later->loss, first->loss);
  TreeLearnerOptions bad;
  bad.loss.kind = PolicyLossKind::kVtrace;
  TreeLearner learner(model, bad, oo);
  absl::StatusOr<TreeStepResult> r = learner.Step(executions);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("vtrace"), std::string::npos);
  // Its loss has no KL or entropy term: asking for one is refused, not ignored.
  TreeLearnerOptions kl;
  kl.loss.kl_coef = 0.1;
  TreeLearner with_kl(model, kl, oo);
  r = with_kl.Step(executions);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("kl_coef"), std::string::npos);
}

}  // namespace
}  // namespace flywheel

namespace flywheel {
namespace {

// packing = flat (every path its own causal document, attended per document) trains the same
// objective as trees with exact weighting, one per execution or one per group: same loss and
// gradient norm, on every path's tokens.
TEST(TreeLearnerTest, FlatPackingStepsLikeExactTrees) {
  RepairHarnessOptions small;
  small.max_retries = 2;
  small.max_subagents = 1;
  std::vector<Execution> executions = ScriptedExecutions(3, small);
  // Two different executions in one group whose rewards differ: advantages ±1 (a copy of one
  // execution would cancel its own gradient).
  executions[1].group_id = executions[0].group_id;
  executions[0].final_reward = 1.0f;
  executions[1].final_reward = 0.0f;
  ModelOptions mo = testing::TinyModelOptions();
  mo.vocab_size = (*MakeRepairHarnessTokenizer(RepairHarnessOptions{}.repair))->vocab_size();
  mo.max_seq_len = 1024;
  OptimizerOptions oo;
  oo.schedule.lr = 1e-3;
  oo.schedule.total_steps = 10;
  std::vector<TreeStepResult> results;
  for (TreePacking packing : {TreePacking::kTree, TreePacking::kGroup, TreePacking::kFlat}) {
    torch::manual_seed(11);
    TreeLearnerOptions options;
    options.weighting = TreeWeighting::kExact;
    options.packing = packing;
    // The scripted agent's log μ are synthetic: PPO's clip would zero most of the gradient.
    options.loss.kind = PolicyLossKind::kTruncatedIs;
    TreeLearner learner(*MakeTransformer(mo), options, oo);
    absl::StatusOr<TreeStepResult> r = learner.Step(executions);
    ASSERT_TRUE(r.ok()) << r.status();
    results.push_back(*r);
  }
  const TreeStepResult& flat = results[2];
  for (const TreeStepResult& tree : {results[0], results[1]}) {
    EXPECT_NEAR(flat.loss, tree.loss, 1e-5 * std::max(1.0, std::abs(tree.loss)));
    EXPECT_NEAR(flat.optimizer.grad_norm, tree.optimizer.grad_norm,
                1e-4 * tree.optimizer.grad_norm);
    EXPECT_GT(tree.optimizer.grad_norm, 1e-3);
    EXPECT_LT(tree.tokens_tree, flat.tokens_tree);
  }
  EXPECT_EQ(flat.tokens_tree, flat.tokens_flat);  // flat rows hold every path whole
  // The group's two executions (different programs) have their first tokens in common.
  EXPECT_LT(results[1].tokens_tree, results[0].tokens_tree);
}

}  // namespace
}  // namespace flywheel
