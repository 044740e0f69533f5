#include "flywheel/model/transformer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/model/sampling.h"
#include "flywheel/model/test_util.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

ModelOptions TinyTransformer(int64_t kv_heads = 2, bool tied = true) {
  ModelOptions o;
  o.vocab_size = 50;
  o.hidden_size = 32;
  o.num_layers = 2;
  o.num_heads = 4;
  o.num_kv_heads = kv_heads;
  o.intermediate_size = 48;
  o.tie_embeddings = tied;
  o.seed = 7;
  return o;
}

Transformer Build(const ModelOptions& o) {
  auto model = MakeTransformer(o);
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

TEST(TransformerTest, ParameterNamesFollowHuggingFaceLlama) {
  auto o = TinyTransformer(2, /*tied=*/false);
  o.attention_bias = true;
  auto model = Build(o);
  const auto params = model->named_parameters();
  for (const char* name :
       {"model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
        "model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.q_proj.bias",
        "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight",
        "model.layers.0.self_attn.o_proj.weight", "model.layers.0.post_attention_layernorm.weight",
        "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
        "model.layers.0.mlp.down_proj.weight", "model.norm.weight", "lm_head.weight"}) {
    EXPECT_NE(params.find(name), nullptr) << name;
  }
  EXPECT_EQ(params["model.layers.0.self_attn.k_proj.weight"].sizes(),
            (std::vector<int64_t>{16, 32}));  // 2 kv heads x head_dim 8
  EXPECT_EQ(Build(TinyTransformer())->named_parameters().find("lm_head.weight"), nullptr);  // tied
}

TEST(TransformerTest, Qwen3ShapeHasPerHeadNormsAndHeadDimApartFromHidden) {
  const ModelOptions o = testing::TinyQwen3StyleOptions();  // hidden 32, 4 heads of 12
  auto model = Build(o);
  const auto params = model->named_parameters();
  EXPECT_EQ(params["model.layers.0.self_attn.q_proj.weight"].sizes(),
            (std::vector<int64_t>{48, 32}));
  EXPECT_EQ(params["model.layers.0.self_attn.k_proj.weight"].sizes(),
            (std::vector<int64_t>{24, 32}));
  EXPECT_EQ(params["model.layers.0.self_attn.o_proj.weight"].sizes(),
            (std::vector<int64_t>{32, 48}));
  EXPECT_EQ(params["model.layers.1.self_attn.q_norm.weight"].sizes(), (std::vector<int64_t>{12}));
  EXPECT_EQ(params["model.layers.1.self_attn.k_norm.weight"].sizes(), (std::vector<int64_t>{12}));
  EXPECT_TRUE(params["model.layers.1.self_attn.k_norm.weight"].equal(torch::ones({12})));
  EXPECT_EQ(
      Build(TinyTransformer())->named_parameters().find("model.layers.0.self_attn.q_norm.weight"),
      nullptr);
}

TEST(TransformerTest, SameSeedSameWeights) {
  auto a = Build(TinyTransformer());
  auto b = Build(TinyTransformer());
  EXPECT_TRUE(a->named_parameters()["model.layers.1.mlp.up_proj.weight"].equal(
      b->named_parameters()["model.layers.1.mlp.up_proj.weight"]));
}

TEST(TransformerTest, InvalidOptionsAreAClearError) {
  auto o = TinyTransformer();
  o.vocab_size = 0;
  auto m = MakeTransformer(o);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("vocab_size"));
  o = TinyTransformer(3);
  EXPECT_THAT(MakeTransformer(o).status().message(), HasSubstr("num_kv_heads"));
}

TEST(TransformerTest, CausalPrefixDoesNotSeeTheFuture) {
  torch::NoGradGuard no_grad;
  auto model = Build(TinyTransformer());
  const auto tokens = torch::randint(50, {1, 10}, torch::kInt64);
  const auto full = model->forward(tokens, CausalLayout(1, 10));
  const auto prefix = model->forward(tokens.narrow(1, 0, 6), CausalLayout(1, 6));
  EXPECT_TRUE(torch::allclose(full.narrow(1, 0, 6), prefix, 1e-5, 1e-5));
}

TEST(TransformerTest, Qwen3ShapePackedBatchEqualsPerDocumentRuns) {
  auto model = Build(testing::TinyQwen3StyleOptions());
  torch::manual_seed(3);
  const auto tokens = torch::randint(40, {1, 12}, torch::kInt64);
  const auto packed = model->forward(tokens, PackedLayout({{5, 7}}, 12));
  const auto a = model->forward(tokens.narrow(1, 0, 5), CausalLayout(1, 5));
  const auto b = model->forward(tokens.narrow(1, 5, 7), CausalLayout(1, 7));
  EXPECT_TRUE(torch::allclose(packed.narrow(1, 0, 5), a, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(packed.narrow(1, 5, 7), b, 1e-5, 1e-5));
}

TEST(TransformerTest, PackedBatchEqualsPerDocumentRuns) {
  torch::NoGradGuard no_grad;
  for (int64_t kv_heads : {4, 2, 1}) {  // multi-head, grouped-query, multi-query
    auto model = Build(TinyTransformer(kv_heads));
    const std::vector<std::vector<int64_t>> docs = {{5, 3, 4}, {9}, {2, 2}};
    const int64_t length = 12;
    const auto tokens = torch::randint(50, {3, length}, torch::kInt64);
    const auto packed = model->forward(tokens, PackedLayout(docs, length));
    for (size_t b = 0; b < docs.size(); ++b) {
      int64_t start = 0;
      for (int64_t n : docs[b]) {
        const auto alone =
            model->forward(tokens[b].narrow(0, start, n).unsqueeze(0), CausalLayout(1, n));
        EXPECT_TRUE(torch::allclose(packed[b].narrow(0, start, n), alone[0], 1e-5, 1e-5))
            << "kv_heads " << kv_heads << " row " << b << " doc at " << start;
        start += n;
      }
    }
  }
}

TEST(TransformerTest, TreeEqualsEachPathRunAlone) {
  torch::NoGradGuard no_grad;
  auto model = Build(TinyTransformer());
  // 0 ─ 1 ─┬─ 2 ─ 4
  //        └─ 3 ─ 5
  const std::vector<int64_t> parents = {-1, 0, 1, 1, 2, 3};
  const auto tokens = torch::randint(50, {1, 7}, torch::kInt64);
  const auto tree = model->forward(tokens, TreeLayout({parents}, 7));
  for (const std::vector<int64_t>& path :
       {std::vector<int64_t>{0, 1, 2, 4}, std::vector<int64_t>{0, 1, 3, 5}}) {
    const auto index = torch::tensor(path, torch::kInt64);
    const auto alone =
        model->forward(tokens[0].index_select(0, index).unsqueeze(0), CausalLayout(1, 4));
    EXPECT_TRUE(torch::allclose(tree[0].index_select(0, index), alone[0], 1e-5, 1e-5));
  }
}

TEST(TransformerTest, FusedProjectionsComputeTheSameFunction) {
  torch::NoGradGuard no_grad;
  auto o = TinyTransformer(2, false);
  o.attention_bias = true;
  auto model = Build(o);
  for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.01);  // nonzero biases
  const auto tokens = torch::randint(50, {2, 7}, torch::kInt64);
  const auto before = model->forward(tokens, CausalLayout(2, 7));
  model->FuseProjectionsForInference();
  const auto after = model->forward(tokens, CausalLayout(2, 7));
  EXPECT_TRUE(torch::allclose(before, after, 1e-5, 1e-5));
}

TEST(TransformerTest, ShapeErrorsBecomeStatus) {
  auto model = Build(TinyTransformer());
  const auto s = TorchCall("forward", [&] {
    model->forward(torch::zeros({2, 5}, torch::kInt64), CausalLayout(2, 4));
  });
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("must both be [B, L]"));
}

TEST(TransformerTest, GradientsFlowForTraining) {
  auto model = Build(TinyTransformer(2, false));
  const auto tokens = torch::randint(50, {2, 6}, torch::kInt64);
  const auto logits = model->forward(tokens, CausalLayout(2, 6));
  const auto loss = -TokenLogprobs(logits.narrow(1, 0, 5), tokens.narrow(1, 1, 5), {}).mean();
  loss.backward();
  const auto grad = model->named_parameters()["model.layers.0.self_attn.q_proj.weight"].grad();
  ASSERT_TRUE(grad.defined());
  EXPECT_GT(grad.abs().sum().item<float>(), 0);
}

}  // namespace
}  // namespace flywheel
