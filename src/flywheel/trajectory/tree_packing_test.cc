#include "flywheel/trajectory/tree_packing.h"

#include <algorithm>
#include <map>
#include <random>
#include <tuple>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/trajectory/path_selection.h"
#include "flywheel/trajectory/random_execution_testing.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

using testing::MakeCall;

// What the model sees for a contribution: the tokens and positions of its ancestor chain.
using Key = std::tuple<std::vector<int32_t>, std::vector<int32_t>, float, float>;
std::multiset<Key> ContributionKeys(const PackedTrees& packed) {
  std::multiset<Key> keys;
  for (const auto& c : packed.contributions) {
    std::vector<int32_t> tokens, positions;
    for (int64_t col = c.col; col >= 0; col = packed.parents[c.row][col]) {
      tokens.push_back(packed.tokens[packed.Index(c.row, col)]);
      positions.push_back(packed.positions[packed.Index(c.row, col)]);
    }
    keys.insert({tokens, positions, c.advantage, c.weight});
  }
  return keys;
}

struct Batch {
  std::vector<TrajectoryTree> trees;
  std::vector<TreeTrainingItem> items;
};

Batch MakeBatch(int executions, int j_max, uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b;
  for (int i = 0; i < executions; ++i) {
    auto tree = TrajectoryTree::FromExecution(testing::RandomExecution(rng, "e" + std::to_string(i)));
    EXPECT_TRUE(tree.ok()) << tree.status();
    b.trees.push_back(std::move(*tree));
  }
  std::uniform_real_distribution<float> adv(-1.0f, 1.0f);
  for (const auto& tree : b.trees) {
    TreeTrainingItem item;
    item.tree = &tree;
    item.paths = SelectPaths(tree.Paths(), j_max).selected;
    for (size_t p = 0; p < item.paths.size(); ++p) item.advantages.push_back(adv(rng));
    b.items.push_back(std::move(item));
  }
  return b;
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
  for (const auto& item : b.items) {
    int64_t on_paths = 0;
    std::vector<bool> seen(item.tree->NumNodes(), false);
    for (const auto& p : item.paths) {
      for (int32_t n : item.tree->PathNodes(p)) {
        if (!seen[n]) ++on_paths;
        seen[n] = true;
      }
    }
    nodes += on_paths;
  }
  EXPECT_EQ(tree->real_tokens, nodes);
  EXPECT_LT(tree->real_tokens, flat->real_tokens);
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
