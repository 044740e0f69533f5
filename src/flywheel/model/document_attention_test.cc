#include "flywheel/model/document_attention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "flywheel/model/attention_layout.h"
#include "flywheel/model/test_util.h"
#include "flywheel/model/torch_status.h"
#include "flywheel/model/transformer.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

constexpr DocumentPath kPaths[] = {DocumentPath::kPerDocument, DocumentPath::kDenseRows,
                                   DocumentPath::kChunks, DocumentPath::kCheaper};

const char* PathName(DocumentPath path) {
  switch (path) {
    case DocumentPath::kPerDocument:
      return "per document";
    case DocumentPath::kDenseRows:
      return "dense rows";
    case DocumentPath::kChunks:
      return "chunks";
    case DocumentPath::kCheaper:
      return "cheapest";
  }
  return "?";
}

// The dense reference: [L, L] scores of every row under a layout's -inf mask, as the
// transformer's general attention path computes them (kv heads repeated as HF repeat_kv).
torch::Tensor DenseMaskedAttention(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, const AttentionLayout& layout,
                                   double scale) {
  const int64_t b = q.size(0), l = q.size(1), heads = q.size(2), dim = q.size(3);
  const int64_t groups = heads / k.size(2);
  const auto qh = q.transpose(1, 2);                               // [B, H, L, D]
  const auto kh = k.transpose(1, 2).repeat_interleave(groups, 1);  // [B, H, L, D]
  const auto vh = v.transpose(1, 2).repeat_interleave(groups, 1);
  const auto mask = AttentionBias(layout.allowed, q.scalar_type()).squeeze(1);
  const auto scores = torch::matmul(qh, kh.transpose(-1, -2)) * scale + mask;  // [B, H, L, L]
  return torch::matmul(torch::softmax(scores, -1), vh).transpose(1, 2).reshape({b, l, heads * dim});
}

struct Qkv {
  torch::Tensor q, k, v;
};

Qkv Random(int64_t rows, int64_t length, int64_t heads, int64_t kv_heads, int64_t dim) {
  torch::manual_seed(5);
  return {torch::randn({rows, length, heads, dim}).requires_grad_(true),
          torch::randn({rows, length, kv_heads, dim}).requires_grad_(true),
          torch::randn({rows, length, kv_heads, dim}).requires_grad_(true)};
}

// Both paths of DocumentAttention over `layout`'s documents (causal, or through the tree mask
// when documents_masked) against the dense masked reference: outputs and q, k, v gradients.
void ExpectPathsEqualTheDenseMaskedAttention(const AttentionLayout& layout, int64_t rows,
                                             int64_t length) {
  const Documents documents{layout.doc_lengths,
                            layout.documents_masked ? layout.allowed : torch::Tensor()};
  for (DocumentPath path : kPaths) {
    for (int64_t kv_heads : {4, 2, 1}) {
      Qkv a = Random(rows, length, 4, kv_heads, 8);
      Qkv b = Random(rows, length, 4, kv_heads, 8);
      const double scale = 1.0 / std::sqrt(8.0);
      const auto got = DocumentAttention(a.q, a.k, a.v, documents, scale, path);
      const auto want = DenseMaskedAttention(b.q, b.k, b.v, layout, scale);
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_TRUE(torch::allclose(got, want, 1e-6, 1e-6))
          << PathName(path) << ", kv_heads " << kv_heads << ": max |diff| "
          << (got - want).abs().max().item<double>();
      const auto upstream = torch::randn(got.sizes());
      (got * upstream).sum().backward();
      (want * upstream).sum().backward();
      for (auto [x, y, name] : {std::tuple{a.q, b.q, "q"}, {a.k, b.k, "k"}, {a.v, b.v, "v"}}) {
        EXPECT_TRUE(torch::allclose(x.grad(), y.grad(), 1e-6, 1e-6))
            << PathName(path) << ", " << name << ", kv_heads " << kv_heads << ": max |diff| "
            << (x.grad() - y.grad()).abs().max().item<double>();
      }
    }
  }
}

TEST(DocumentAttentionTest, EqualsTheDenseMaskedAttentionAndItsGradients) {
  const std::vector<std::vector<int64_t>> docs = {{5, 4}, {3, 1, 6}, {12}};  // padding 3, 2, 0
  ExpectPathsEqualTheDenseMaskedAttention(PackedLayout(docs, 12), 3, 12);
}

TEST(DocumentAttentionTest, TreeBlocksEqualTheDenseMaskedAttentionAndItsGradients) {
  // Row 0: a tree of 5 then a tree of 3, padding after; row 1: one segment of 6, padding after.
  const AttentionLayout layout = TreeLayout({{-1, 0, 1, 1, 2, -1, 5, 5}, {-1, 0, -1, 2, 1, 3}}, 10);
  ASSERT_TRUE(layout.documents_masked);
  ExpectPathsEqualTheDenseMaskedAttention(layout, 2, 10);
}

// Trees of many branches (each token's parent drawn from the tokens before it, some roots), long
// enough that chunks read different keys: row 0 holds a tree of 23 and one of 9, row 1 one of 30
// and padding.
TEST(DocumentAttentionTest, BranchyTreesEqualTheDenseMaskedAttention) {
  std::mt19937 rng(7);
  auto tree = [&](int64_t n) {
    std::vector<int64_t> parents = {-1};
    for (int64_t i = 1; i < n; ++i) {
      parents.push_back(rng() % 5 == 0 ? -1 : static_cast<int64_t>(rng() % i));
    }
    return parents;
  };
  std::vector<int64_t> row0 = tree(23);
  for (int64_t p : tree(9)) row0.push_back(p < 0 ? -1 : p + 23);
  const AttentionLayout layout = TreeLayout({row0, tree(30)}, 32);
  ASSERT_TRUE(layout.documents_masked);
  ExpectPathsEqualTheDenseMaskedAttention(layout, 2, 32);
}

TEST(DocumentAttentionTest, PaddingOutputsItsOwnValue) {
  Qkv a = Random(1, 6, 2, 1, 4);
  for (DocumentPath path : kPaths) {
    const auto out = DocumentAttention(a.q, a.k, a.v, {{{4}}, {}}, 0.5, path);
    // Tokens 4 and 5 are padding: each of the 2 query heads reads the single kv head's value.
    for (int64_t t : {4, 5}) {
      EXPECT_TRUE(out[0][t].equal(a.v[0][t][0].repeat({2}))) << PathName(path);
    }
  }
}

// The choice between the paths, where it does not depend on the machine: rows of many short
// documents are one dense matrix (the per-document path spends a dozen operations on each of
// them to save little; here about 15 times what the dense matrix costs), a short document
// in a long row is attended alone (the dense matrix would be 100 times its entries).
TEST(DocumentAttentionTest, TheCheaperPathIsChosen) {
  // Measured on first use even without gradients (as an evaluation's first call would be).
  torch::NoGradGuard no_grad;
  const torch::Tensor short_rows = torch::zeros({8, 64, 4, 16});
  EXPECT_TRUE(DenseIsCheaper(short_rows, 2,
                             std::vector<std::vector<int64_t>>(8, std::vector<int64_t>(16, 4))));
  const torch::Tensor long_row = torch::zeros({1, 1024, 4, 16});
  EXPECT_FALSE(DenseIsCheaper(long_row, 2, {{100}}));
  // Never more dense scores than the cap, however short the documents.
  const torch::Tensor huge = torch::zeros({1, 1, 1, 1}).expand({64, 1024, 32, 16});  // sizes only
  EXPECT_FALSE(
      DenseIsCheaper(huge, 8, std::vector<std::vector<int64_t>>(64, std::vector<int64_t>(256, 4))));
}

TEST(DocumentAttentionTest, BadDocumentsAreErrors) {
  Qkv a = Random(2, 6, 2, 2, 4);
  auto call = [&](std::vector<std::vector<int64_t>> docs) {
    return TorchCall("attention", [&] { DocumentAttention(a.q, a.k, a.v, {docs, {}}, 1.0); });
  };
  EXPECT_THAT(call({{4, 3}, {1}}).message(), HasSubstr("more than the row length 6"));
  EXPECT_THAT(call({{4}}).message(), HasSubstr("1 rows of document lengths for 2 rows"));
  EXPECT_THAT(call({{0}, {1}}).message(), HasSubstr("must be > 0"));
  EXPECT_TRUE(call({{6}, {}}).ok());  // an all-padding row is fine
}

// Two copies of one model: `by_documents` runs `layout` (its doc_lengths set), `dense` the same
// layout with doc_lengths cleared (scores over the [L, L] mask). Logits and every parameter's
// gradient must agree.
void ExpectDocumentsEqualDense(const Transformer& by_documents, const Transformer& dense,
                               const torch::Tensor& tokens, const AttentionLayout& layout) {
  AttentionLayout dense_layout = layout;
  dense_layout.doc_lengths.clear();
  const auto got = by_documents->forward(tokens, layout);
  const auto want = dense->forward(tokens, dense_layout);
  EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5))
      << "max |diff| " << (got - want).abs().max().item<double>();
  const auto upstream = torch::randn(got.sizes());
  (got * upstream).sum().backward();
  (want * upstream).sum().backward();
  const auto dense_params = dense->named_parameters();
  for (const auto& p : by_documents->named_parameters()) {
    const auto& g = p.value().grad();
    const auto& h = dense_params[p.key()].grad();
    ASSERT_TRUE(g.defined() && h.defined()) << p.key();
    EXPECT_TRUE(torch::allclose(g, h, 1e-5, 1e-5))
        << p.key() << " max |diff| " << (g - h).abs().max().item<double>();
  }
}

// The transformer's packed training forward (document attention, fused projections) against its
// general path over the dense mask of the same layout: logits and every parameter's gradient.
TEST(DocumentAttentionTest, TransformerPackedForwardEqualsTheDenseMaskPath) {
  ModelOptions biased = testing::TinyModelOptions(/*seed=*/11);
  biased.attention_bias = true;
  for (const ModelOptions& o : {testing::TinyModelOptions(/*seed=*/11), biased,
                                testing::TinyQwen3StyleOptions(/*seed=*/11)}) {
    auto packed = MakeTransformer(o);
    auto dense = MakeTransformer(o);
    ASSERT_TRUE(packed.ok() && dense.ok());
    if (o.qk_norm) {  // per-head norms start at one: make them matter (the same in both)
      torch::NoGradGuard no_grad;
      const auto dense_params = (*dense)->named_parameters();
      for (auto& p : (*packed)->named_parameters()) {
        if (p.key().ends_with("q_norm.weight") || p.key().ends_with("k_norm.weight")) {
          p.value().uniform_(0.5, 1.5);
          dense_params[p.key()].copy_(p.value());
        }
      }
    }
    torch::manual_seed(2);
    const auto tokens = torch::randint(0, o.vocab_size, {2, 16}, torch::kInt64);
    ExpectDocumentsEqualDense(*packed, *dense, tokens, PackedLayout({{7, 5, 2}, {9}}, 16));
  }
}

// Rows of trees (TreeLayout): each tree is a segment attended through its block of the ancestor
// mask; logits and gradients equal the dense mask's over the whole row.
TEST(DocumentAttentionTest, TransformerTreeSegmentsEqualTheDenseMaskPath) {
  // Row 0: a tree of 5 (root, two branches) then a tree of 3; row 1: a forest of two roots whose
  // second tree reaches back across a sibling (one segment), padding after.
  const std::vector<std::vector<int64_t>> parents = {{-1, 0, 1, 1, 2, -1, 5, 5},
                                                     {-1, 0, -1, 2, 1, 3}};
  const AttentionLayout layout = TreeLayout(parents, 10);
  EXPECT_EQ(layout.doc_lengths, (std::vector<std::vector<int64_t>>{{5, 3}, {6}}));
  EXPECT_TRUE(layout.documents_masked);
  const ModelOptions o = testing::TinyModelOptions(/*seed=*/5);
  auto segmented = MakeTransformer(o);
  auto dense = MakeTransformer(o);
  ASSERT_TRUE(segmented.ok() && dense.ok());
  torch::manual_seed(3);
  const auto tokens = torch::randint(0, o.vocab_size, {2, 10}, torch::kInt64);
  ExpectDocumentsEqualDense(*segmented, *dense, tokens, layout);
}

}  // namespace
}  // namespace flywheel
