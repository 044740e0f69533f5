#include "flywheel/model/chunk_attention.h"

#include <gtest/gtest.h>

#include <vector>

#include "flywheel/model/attention_layout.h"

namespace flywheel {
namespace {

// Causal documents of 5 and 3 tokens in a row of 10, chunks of 4: [0, 4) reads 0..3; [4, 8) holds
// the last token of the first document and the second document, so it reads 0..7.
TEST(ChunkAttentionTest, ACausalChunkReadsFromItsFirstDocumentsStart) {
  const ChunkCut cut = CutChunks({{5, 3}}, torch::Tensor(), 10, 4);
  EXPECT_EQ(cut.entries, 4 * 8 + 4 * 4);  // 8 keys and 4 keys: under 2/3, two batches
  EXPECT_EQ(cut.batches.size(), 2u);
}

// A prefix of 4 tokens, then two branches of 8 from its last token: a chunk in the second branch
// reads the prefix and its own branch, never the first branch.
TEST(ChunkAttentionTest, AChunkInABranchReadsItsAncestorsOnly) {
  std::vector<int64_t> parents = {-1, 0, 1, 2};
  for (int64_t i = 4; i < 12; ++i) parents.push_back(i == 4 ? 3 : i - 1);
  for (int64_t i = 12; i < 20; ++i) parents.push_back(i == 12 ? 3 : i - 1);
  const AttentionLayout layout = TreeLayout({parents}, 20);
  ASSERT_EQ(layout.doc_lengths, std::vector<std::vector<int64_t>>{{20}});
  const torch::Tensor mask = layout.allowed.contiguous();
  // Keys read: 4, 8, 12, 8 (0..3 and 12..15), 12 (0..3 and 12..19); against 20² whole.
  const ChunkCut cut = CutChunks(layout.doc_lengths, mask, 20, 4);
  EXPECT_EQ(cut.entries, 4 * 4 * 12 + 4 * 4);
  EXPECT_EQ(cut.batches.size(), 2u);

  const ChunkPlan plan = PlanChunks(cut, mask);
  bool found = false;
  for (const ChunkBatch& batch : plan.batches) {
    for (int64_t n = 0; n < batch.chunks; ++n) {
      if (batch.queries[n * 4].item<int64_t>() != 12) continue;
      found = true;
      const torch::Tensor keys = batch.key_index.narrow(0, n * batch.keys, 8);
      EXPECT_TRUE(keys.equal(torch::tensor({0, 1, 2, 3, 12, 13, 14, 15}, torch::kLong))) << keys;
      EXPECT_TRUE(batch.additive[n].narrow(-1, 8, batch.keys - 8).isinf().all().item<bool>())
          << "slots past the chunk's 8 keys are padding";
    }
  }
  EXPECT_TRUE(found);
  // Every token's output comes from a query slot; none is taken for padding.
  EXPECT_TRUE((plan.source < 5 * 4).all().item<bool>()) << plan.source;
}

TEST(ChunkAttentionTest, AMaskOfTheWrongShapeIsAnError) {
  EXPECT_THROW(CutChunks({{4}}, torch::ones({1, 4, 5}, torch::kBool), 4, 2), c10::Error);
  EXPECT_THROW(CutChunks({{4}}, torch::Tensor(), 4, 0), c10::Error);
}

}  // namespace
}  // namespace flywheel
