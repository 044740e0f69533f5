#include "flywheel/trajectory/tree_packing.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <span>
#include <tuple>

#include "flywheel/trajectory/path_selection.h"
#include "flywheel/trajectory/random_execution_testing.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

using testing::MakeCall;

// What the model sees for a contribution: the tokens and positions of its ancestor chain, and
// what the loss weighs it with.
using Key = std::tuple<std::vector<int32_t>, std::vector<int32_t>, float, float, float>;
std::multiset<Key> ContributionKeys(const PackedTrees& packed) {
  std::multiset<Key> keys;
  for (const auto& c : packed.contributions) {
    std::vector<int32_t> tokens, positions;
    for (int64_t col = c.col; col >= 0; col = packed.parents[c.row][col]) {
      tokens.push_back(packed.tokens[packed.Index(c.row, col)]);
      positions.push_back(packed.positions[packed.Index(c.row, col)]);
    }
    keys.insert({tokens, positions, c.advantage, c.weight, c.behaviour_logprob});
  }
  return keys;
}

struct Batch {
  std::vector<TrajectoryTree> trees;
  std::vector<TreeTrainingItem> items;
};

// `group_size` > 0: executions in GRPO groups of that size, each group's executions from one
// prompt of 12 tokens (BOS + 11).
Batch MakeBatch(int executions, int j_max, uint32_t seed, int group_size = 0) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> token(1, 40);
  Batch b;
  std::vector<int32_t> prompt;
  for (int i = 0; i < executions; ++i) {
    if (group_size > 0 && i % group_size == 0) {
      prompt = {0};
      for (int k = 0; k < 11; ++k) prompt.push_back(token(rng));
    }
    auto tree = TrajectoryTree::FromExecution(
        testing::RandomExecution(rng, "e" + std::to_string(i), /*turns=*/6, prompt));
    EXPECT_TRUE(tree.ok()) << tree.status();
    b.trees.push_back(std::move(*tree));
  }
  std::uniform_real_distribution<float> adv(-1.0f, 1.0f);
  for (const auto& tree : b.trees) {
    TreeTrainingItem item;
    item.tree = &tree;
    item.paths = SelectPaths(tree.Paths(), j_max).selected;
    for (size_t p = 0; p < item.paths.size(); ++p) item.advantages.push_back(adv(rng));
    if (group_size > 0) item.group = static_cast<int64_t>(b.items.size()) / group_size;
    b.items.push_back(std::move(item));
  }
  return b;
}

// Nodes on the selected paths of each item's own tree.
int64_t NodesOnPaths(const TreeTrainingItem& item) {
  std::vector<bool> seen(item.tree->NumNodes(), false);
  int64_t n = 0;
  for (const auto& p : item.paths) {
    for (int32_t node : item.tree->PathNodes(p)) {
      if (!seen[node]) ++n;
      seen[node] = true;
    }
  }
  return n;
}

TEST(TreePackingTest, ExactTreeSeesWhatEachFlatPathSees) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    Batch b = MakeBatch(4, 0, seed);
    for (auto agg : {PathAggregation::kTokenMean, PathAggregation::kSequenceMean}) {
      auto tree = PackTrees(b.items, 256, TreeWeighting::kExact, agg);
      auto flat = PackFlatPaths(b.items, 256, agg);
      ASSERT_TRUE(tree.ok()) << tree.status();
      ASSERT_TRUE(flat.ok()) << flat.status();
      // Same (ancestor tokens, positions, advantage, weight) terms: under an ancestor mask the
      // model computes the same log-prob for each, so loss and gradient are identical.
      EXPECT_EQ(ContributionKeys(*tree), ContributionKeys(*flat)) << "seed " << seed;
      EXPECT_LE(tree->real_tokens, flat->real_tokens);
    }
  }
}

TEST(TreePackingTest, TreesComputeSharedPrefixesOnce) {
  Batch b = MakeBatch(8, 0, 7);
  auto tree = PackTrees(b.items, 512, TreeWeighting::kExact, PathAggregation::kTokenMean);
  auto flat = PackFlatPaths(b.items, 512, PathAggregation::kTokenMean);
  ASSERT_TRUE(tree.ok() && flat.ok());
  int64_t nodes = 0;
  for (const auto& item : b.items) nodes += NodesOnPaths(item);
  EXPECT_EQ(tree->real_tokens, nodes);
  EXPECT_LT(tree->real_tokens, flat->real_tokens);
}

// Executions of one group laid out as one tree: their prompt once, every contribution as it was.
TEST(TreePackingTest, AGroupSharesItsPrompt) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    Batch b = MakeBatch(8, 0, seed, /*group_size=*/4);
    std::vector<TreeTrainingItem> apart = b.items;
    for (auto& item : apart) item.group = -1;
    for (auto weighting : {TreeWeighting::kExact, TreeWeighting::kDedup}) {
      auto grouped = PackTrees(b.items, 1024, weighting, PathAggregation::kTokenMean);
      auto separate = PackTrees(apart, 1024, weighting, PathAggregation::kTokenMean);
      ASSERT_TRUE(grouped.ok()) << grouped.status();
      ASSERT_TRUE(separate.ok()) << separate.status();
      EXPECT_EQ(ContributionKeys(*grouped), ContributionKeys(*separate)) << "seed " << seed;
      // Two groups of four, each prompt (12 tokens) stored once instead of four times; paths of
      // different executions may also agree past it.
      EXPECT_LE(grouped->real_tokens, separate->real_tokens - 2 * 3 * 12) << "seed " << seed;
      EXPECT_EQ(separate->real_tokens, [&] {
        int64_t n = 0;
        for (const auto& item : apart) n += NodesOnPaths(item);
        return n;
      }());
    }
    auto flat = PackFlatPaths(b.items, 1024, PathAggregation::kSequenceMean);
    auto grouped = PackTrees(b.items, 1024, TreeWeighting::kExact, PathAggregation::kSequenceMean);
    ASSERT_TRUE(flat.ok() && grouped.ok());
    EXPECT_EQ(ContributionKeys(*grouped), ContributionKeys(*flat)) << "seed " << seed;
  }
}

// Two executions that generated the same token at the same prefix under different policy
// versions share its node; each contribution keeps the log μ its own execution recorded.
TEST(TreePackingTest, SharedNodesKeepEachExecutionsBehaviourLogprob) {
  Execution a, b;
  a.execution_id = "a";
  b.execution_id = "b";
  a.final_reward = b.final_reward = 0;
  a.calls = {MakeCall("a0", Role::kMain, {0, 5}, {7, 8}, -0.25f)};
  b.calls = {MakeCall("b0", Role::kMain, {0, 5}, {7, 9}, -2.0f)};
  auto ta = TrajectoryTree::FromExecution(a);
  auto tb = TrajectoryTree::FromExecution(b);
  ASSERT_TRUE(ta.ok() && tb.ok());
  std::vector<TreeTrainingItem> items = {{&*ta, ta->Paths(), {1.0f}, 0},
                                         {&*tb, tb->Paths(), {-1.0f}, 0}};
  auto packed = PackTrees(items, 8, TreeWeighting::kExact, PathAggregation::kTokenMean);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(packed->real_tokens, 5);  // 0 5 7, then 8 and 9
  ASSERT_EQ(packed->contributions.size(), 4u);
  std::map<std::pair<int32_t, float>, float> logprob;  // (col, advantage) → log μ
  for (const auto& c : packed->contributions) logprob[{c.col, c.advantage}] = c.behaviour_logprob;
  EXPECT_EQ(logprob.at({2, 1.0f}), -0.25f);  // the shared 7, as a recorded it
  EXPECT_EQ(logprob.at({2, -1.0f}), -2.0f);  // and as b recorded it
}

// PackRows tries rows of the largest segment (a group's) rounded up, 1.5 and 2 times that, and
// keeps the fewest cells.
TEST(TreePackingTest, PackRowsFitsTheLargestSegment) {
  Batch b = MakeBatch(12, 0, 5, /*group_size=*/4);
  int64_t largest = 0;
  for (size_t g = 0; g < 3; ++g) {
    auto one = PackTrees(std::span(b.items).subspan(4 * g, 4), 4096, TreeWeighting::kExact,
                         PathAggregation::kTokenMean);
    ASSERT_TRUE(one.ok()) << one.status();
    largest = std::max(largest, one->real_tokens);
  }
  const int64_t shortest = (largest + 63) / 64 * 64;
  auto rows =
      PackRows(b.items, /*flat=*/false, TreeWeighting::kExact, PathAggregation::kTokenMean, 64);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_THAT((std::vector<int64_t>{shortest, (shortest * 3 / 2 + 63) / 64 * 64, 2 * shortest}),
              ::testing::Contains(rows->length));
  auto tight = PackTrees(b.items, shortest, TreeWeighting::kExact, PathAggregation::kTokenMean);
  ASSERT_TRUE(tight.ok());
  EXPECT_LE(rows->rows * rows->length, tight->rows * tight->length);
  EXPECT_EQ(rows->real_tokens, tight->real_tokens);
  EXPECT_FALSE(
      PackRows(b.items, false, TreeWeighting::kExact, PathAggregation::kTokenMean, 0).ok());
}

TEST(TreePackingTest, LayoutIsTopologicalWithDepthPositions) {
  Batch b = MakeBatch(6, 0, 3);
  auto packed = PackTrees(b.items, 128, TreeWeighting::kDedup, PathAggregation::kTokenMean);
  ASSERT_TRUE(packed.ok()) << packed.status();
  for (int64_t r = 0; r < packed->rows; ++r) {
    for (size_t col = 0; col < packed->parents[r].size(); ++col) {
      const int64_t parent = packed->parents[r][col];
      ASSERT_LT(parent, static_cast<int64_t>(col));
      const int32_t pos = packed->positions[packed->Index(r, col)];
      if (parent < 0) {
        EXPECT_EQ(pos, 0);
      } else {
        EXPECT_EQ(pos, packed->positions[packed->Index(r, parent)] + 1);
      }
    }
  }
}

TEST(TreePackingTest, DedupCountsEachTokenOnceWithMeanAdvantage) {
  // two paths share the generated token 5 after [0 1]; path b continues with 6
  Execution e;
  e.execution_id = "x";
  e.final_reward = 1.0f;
  e.calls = {MakeCall("a", Role::kMain, {0, 1}, {5}), MakeCall("b", Role::kMain, {0, 1}, {5, 6}),
             MakeCall("c", Role::kMain, {0, 1}, {7})};
  auto tree = TrajectoryTree::FromExecution(e);
  ASSERT_TRUE(tree.ok());
  auto paths = tree->Paths();  // a is a prefix of b (same role): absorbed
  ASSERT_EQ(paths.size(), 2u);
  TreeTrainingItem item{&*tree, paths, {1.0f, -1.0f}};
  std::vector<TreeTrainingItem> items = {item};
  auto packed = PackTrees(items, 16, TreeWeighting::kDedup, PathAggregation::kTokenMean);
  ASSERT_TRUE(packed.ok());
  ASSERT_EQ(packed->contributions.size(), 3u);  // tokens 5, 6, 7 once each
  float weight_sum = 0;
  for (const auto& c : packed->contributions) {
    weight_sum += c.weight;
    const int32_t token = packed->tokens[packed->Index(c.row, c.col)];
    if (token == 5 || token == 6) {
      EXPECT_FLOAT_EQ(c.advantage, 1.0f);
    } else {
      EXPECT_EQ(token, 7);
      EXPECT_FLOAT_EQ(c.advantage, -1.0f);
    }
  }
  EXPECT_FLOAT_EQ(weight_sum, 1.0f);

  // Now two distinct paths through the shared token: its advantage is their mean.
  e.calls = {MakeCall("a", Role::kMain, {0, 1}, {5, 8}),
             MakeCall("b", Role::kMain, {0, 1}, {5, 6})};
  tree = TrajectoryTree::FromExecution(e);
  ASSERT_TRUE(tree.ok());
  items = {TreeTrainingItem{&*tree, tree->Paths(), {1.0f, 0.0f}}};
  packed = PackTrees(items, 16, TreeWeighting::kDedup, PathAggregation::kTokenMean);
  ASSERT_TRUE(packed.ok());
  for (const auto& c : packed->contributions) {
    if (packed->tokens[packed->Index(c.row, c.col)] == 5) {
      EXPECT_FLOAT_EQ(c.advantage, 0.5f);
    }
  }
  // exact keeps one term per path through the token instead
  auto exact = PackTrees(items, 16, TreeWeighting::kExact, PathAggregation::kTokenMean);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->contributions.size(), 4u);
}

TEST(TreePackingTest, DedupAveragesWithinThenAcrossExecutions) {
  Batch b = MakeBatch(3, 0, 11);
  auto packed = PackTrees(b.items, 256, TreeWeighting::kDedup, PathAggregation::kTokenMean);
  ASSERT_TRUE(packed.ok());
  float total = 0;
  for (const auto& c : packed->contributions) total += c.weight;
  EXPECT_NEAR(total, 1.0f, 1e-5f);
}

TEST(TreePackingTest, ErrorsNameTheExecution) {
  Batch b = MakeBatch(1, 0, 5);
  auto packed = PackTrees(b.items, 4, TreeWeighting::kExact, PathAggregation::kTokenMean);
  ASSERT_FALSE(packed.ok());
  EXPECT_THAT(packed.status().message(), HasSubstr("execution 'e0'"));
  EXPECT_THAT(packed.status().message(), HasSubstr("row length 4"));

  Execution e;
  e.execution_id = "root";
  e.final_reward = 0;
  e.calls = {MakeCall("a", Role::kMain, {}, {5, 6})};
  auto tree = TrajectoryTree::FromExecution(e);
  ASSERT_TRUE(tree.ok());
  std::vector<TreeTrainingItem> items = {{&*tree, tree->Paths(), {1.0f}}};
  packed = PackTrees(items, 16, TreeWeighting::kExact, PathAggregation::kTokenMean);
  EXPECT_THAT(packed.status().message(), HasSubstr("cannot be scored"));
  items[0].advantages.clear();
  packed = PackTrees(items, 16, TreeWeighting::kExact, PathAggregation::kTokenMean);
  EXPECT_THAT(packed.status().message(), HasSubstr("advantages"));
}

}  // namespace
}  // namespace flywheel
