#include "flywheel/model/attention_layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace flywheel {
namespace {

using ::testing::HasSubstr;

torch::Tensor Mask(std::vector<std::vector<int>> rows) {
  const int64_t n = static_cast<int64_t>(rows.size());
  auto t = torch::zeros({n, n}, torch::kBool);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) t[i][j] = rows[i][j] != 0;
  }
  return t;
}

TEST(AttentionLayoutTest, CausalIsLowerTriangularWithCountingPositions) {
  const auto layout = CausalLayout(2, 4);
  EXPECT_EQ(layout.positions.sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE(layout.positions[1].equal(torch::arange(4, torch::kInt64)));
  EXPECT_TRUE(
      layout.allowed[0].equal(Mask({{1, 0, 0, 0}, {1, 1, 0, 0}, {1, 1, 1, 0}, {1, 1, 1, 1}})));
}

TEST(AttentionLayoutTest, PackedIsBlockDiagonalWithRestartingPositionsAndPadding) {
  const auto layout = PackedLayout({{3, 2}, {1}}, 6);
  EXPECT_TRUE(layout.positions[0].equal(torch::tensor({0, 1, 2, 0, 1, 0}, torch::kInt64)));
  EXPECT_TRUE(layout.allowed[0].equal(Mask({{1, 0, 0, 0, 0, 0},
                                            {1, 1, 0, 0, 0, 0},
                                            {1, 1, 1, 0, 0, 0},
                                            {0, 0, 0, 1, 0, 0},
                                            {0, 0, 0, 1, 1, 0},
                                            {0, 0, 0, 0, 0, 1}})));
  // Row 1: one token, then padding that sees only itself.
  EXPECT_TRUE(layout.positions[1].equal(torch::zeros({6}, torch::kInt64)));
  EXPECT_TRUE(layout.allowed[1].equal(torch::eye(6, torch::kBool)));
}

TEST(AttentionLayoutTest, TreeAttendsToAncestorsWithDepthPositions) {
  // 0 ─ 1 ─┬─ 2 ─ 4
  //        └─ 3
  const auto layout = TreeLayout({{-1, 0, 1, 1, 2}}, 6);
  EXPECT_TRUE(layout.positions[0].equal(torch::tensor({0, 1, 2, 2, 3, 0}, torch::kInt64)));
  EXPECT_TRUE(layout.allowed[0].equal(Mask({{1, 0, 0, 0, 0, 0},
                                            {1, 1, 0, 0, 0, 0},
                                            {1, 1, 1, 0, 0, 0},
                                            {1, 1, 0, 1, 0, 0},
                                            {1, 1, 1, 0, 1, 0},
                                            {0, 0, 0, 0, 0, 1}})));
}

TEST(AttentionLayoutTest, ChainTreeEqualsCausal) {
  const auto tree = TreeLayout({{-1, 0, 1, 2}}, 4);
  const auto causal = CausalLayout(1, 4);
  EXPECT_TRUE(tree.positions.equal(causal.positions));
  EXPECT_TRUE(tree.allowed.equal(causal.allowed));
}

TEST(AttentionLayoutTest, BadInputIsAClearError) {
  auto packed = MakePackedLayout({{3, 4}}, 6);
  ASSERT_FALSE(packed.ok());
  EXPECT_THAT(packed.status().message(),
              HasSubstr("row 0 documents total more than the row length 6"));
  EXPECT_FALSE(MakePackedLayout({{0}}, 6).ok());
  auto tree = MakeTreeLayout({{-1, 2, 0}}, 4);
  ASSERT_FALSE(tree.ok());
  EXPECT_THAT(tree.status().message(), HasSubstr("token 1 has parent 2"));
  EXPECT_FALSE(MakeTreeLayout({{-1, 0, 1}}, 2).ok());
}

}  // namespace
}  // namespace flywheel
