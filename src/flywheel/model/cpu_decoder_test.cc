#include "flywheel/model/cpu_decoder.h"

#include <random>

#include <gtest/gtest.h>

#include "flywheel/model/attention_layout.h"
#include "flywheel/model/test_util.h"

namespace flywheel {
namespace {

ModelOptions TinyDecoder() { return testing::TinyModelOptions(); }

// Shapes that take the other code paths: head_dim 64 without GQA, untied head with q/k/v bias
// (Qwen2), and an odd head_dim (the generic attention loop).
std::vector<ModelOptions> Variants() {
  std::vector<ModelOptions> out = {TinyDecoder()};
  ModelOptions wide = TinyDecoder();
  wide.hidden_size = 128;
  wide.num_heads = 2;
  wide.num_kv_heads = 2;
  out.push_back(wide);
  ModelOptions qwen = TinyDecoder();
  qwen.attention_bias = true;
  qwen.tie_embeddings = false;
  qwen.num_kv_heads = 1;
  out.push_back(qwen);
  ModelOptions odd = TinyDecoder();
  odd.hidden_size = 36;
  odd.num_heads = 2;
  odd.num_kv_heads = 1;
  out.push_back(odd);
  out.push_back(testing::TinyQwen3StyleOptions());  // q/k norms, head_dim 12, llama3 rope
  return out;
}

// Bias values are zero and the per-head norms one at initialisation; make them matter.
Transformer Model(const ModelOptions& o) {
  auto model = *MakeTransformer(o);
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    if (item.key().ends_with(".bias")) item.value().normal_(0, 0.5);
    if (item.key().ends_with("q_norm.weight") || item.key().ends_with("k_norm.weight")) {
      item.value().uniform_(0.5, 1.5);
    }
  }
  return model;
}

torch::Tensor FullLogits(const Transformer& model, const std::vector<int64_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  return model->forward(torch::tensor(tokens).unsqueeze(0), CausalLayout(1, n))[0][n - 1];
}

// Sequences in slots out of row order: two are prefilled together in one call, a third joins
// later, then all decode together, each at its own length, for several steps (the cache grows on
// the way). Every step's logits must equal a full recomputation of that sequence.
void CheckRaggedDecode(const ModelOptions& o) {
  SCOPED_TRACE(::testing::Message() << "hidden " << o.hidden_size << " heads " << o.num_heads
                                    << "/" << o.num_kv_heads << " bias " << o.attention_bias
                                    << " head_dim " << o.HeadDim() << " qk_norm " << o.qk_norm);
  auto model = Model(o);
  ASSERT_TRUE(CpuDecoderWeights::Supports(model));
  const auto weights = CpuDecoderWeights::From(model);
  CpuDecoder decoder(o, /*initial_slots=*/1, /*initial_capacity=*/4);
  std::mt19937_64 rng(5);
  auto random_tokens = [&](int64_t n) {
    std::vector<int64_t> t(n);
    for (auto& x : t) x = static_cast<int64_t>(rng() % o.vocab_size);
    return t;
  };
  std::vector<std::vector<int64_t>> seqs = {random_tokens(5), random_tokens(1), random_tokens(9)};
  const std::vector<int64_t> slots = {2, 0, 1};
  std::vector<float> logits(3 * o.vocab_size);
  auto check = [&](const std::vector<int64_t>& which, const std::string& what) {
    for (size_t i = 0; i < which.size(); ++i) {
      const auto expected = FullLogits(model, seqs[which[i]]);
      const auto got = torch::from_blob(logits.data() + i * o.vocab_size, {o.vocab_size});
      EXPECT_TRUE(torch::allclose(got, expected, 1e-5, 1e-5))
          << what << " sequence " << which[i] << " max diff "
          << (got - expected).abs().max().item<float>();
    }
  };
  // Sequences 0 and 1 prefilled in one call.
  std::vector<DecodeRow> rows;
  std::vector<int64_t> logit_rows;
  for (int64_t s : {0, 1}) {
    for (size_t p = 0; p < seqs[s].size(); ++p) {
      rows.push_back({slots[s], static_cast<int64_t>(p), seqs[s][p]});
    }
    logit_rows.push_back(static_cast<int64_t>(rows.size()) - 1);
  }
  decoder.Reserve(3, 16);
  decoder.Forward(weights, rows, logit_rows, logits.data());
  check({0, 1}, "prefill");
  // Sequence 2 prefills while 0 and 1 decode, in one call.
  rows.clear();
  logit_rows.clear();
  for (int64_t s : {0, 1}) {
    seqs[s].push_back(static_cast<int64_t>(rng() % o.vocab_size));
    rows.push_back({slots[s], static_cast<int64_t>(seqs[s].size()) - 1, seqs[s].back()});
    logit_rows.push_back(static_cast<int64_t>(rows.size()) - 1);
  }
  for (size_t p = 0; p < seqs[2].size(); ++p) {
    rows.push_back({slots[2], static_cast<int64_t>(p), seqs[2][p]});
  }
  logit_rows.push_back(static_cast<int64_t>(rows.size()) - 1);
  decoder.Forward(weights, rows, logit_rows, logits.data());
  check({0, 1, 2}, "mixed");
  for (int step = 0; step < 12; ++step) {
    rows.clear();
    logit_rows.clear();
    int64_t longest = 0;
    for (int64_t s = 0; s < 3; ++s) {
      seqs[s].push_back(static_cast<int64_t>(rng() % o.vocab_size));
      rows.push_back({slots[s], static_cast<int64_t>(seqs[s].size()) - 1, seqs[s].back()});
      logit_rows.push_back(s);
      longest = std::max<int64_t>(longest, seqs[s].size());
    }
    decoder.Reserve(3, longest);
    decoder.Forward(weights, rows, logit_rows, logits.data());
    check({0, 1, 2}, ::testing::PrintToString(step));
  }
  EXPECT_GE(decoder.capacity(), 22);
}


// On every SIMD target this CPU supports (simd_kernels.h), for every model shape.
TEST(CpuDecoderTest, RaggedDecodeAndPrefillEqualFullRecomputation) {
  c10::InferenceMode guard;
  for (const int64_t target : simd::SupportedTargets()) {
    simd::ScopedTarget scoped(target);
    SCOPED_TRACE(simd::TargetName(target));
    for (const ModelOptions& o : Variants()) CheckRaggedDecode(o);
  }
}

TEST(CpuDecoderTest, MoveSlotCarriesTheKeys) {
  c10::InferenceMode guard;
  const ModelOptions o = TinyDecoder();
  auto model = Model(o);
  const auto weights = CpuDecoderWeights::From(model);
  CpuDecoder decoder(o, 2, 8);
  const std::vector<int64_t> tokens = {3, 1, 4, 1, 5};
  std::vector<DecodeRow> rows;
  for (int64_t p = 0; p < 5; ++p) rows.push_back({1, p, tokens[p]});
  std::vector<float> logits(o.vocab_size);
  decoder.Forward(weights, rows, {}, logits.data());
  decoder.MoveSlot(1, 0, 5);
  const std::vector<DecodeRow> next = {{0, 5, 9}};
  const std::vector<int64_t> last = {0};
  decoder.Forward(weights, next, last, logits.data());
  const auto expected = FullLogits(model, {3, 1, 4, 1, 5, 9});
  EXPECT_TRUE(
      torch::allclose(torch::from_blob(logits.data(), {o.vocab_size}), expected, 1e-5, 1e-5));
}

TEST(CpuDecoderTest, OnlyFloat32CpuWeightsAreSupported) {
  auto model = *MakeTransformer(TinyDecoder());
  EXPECT_TRUE(CpuDecoderWeights::Supports(model));
  model->to(torch::kFloat64);
  EXPECT_FALSE(CpuDecoderWeights::Supports(model));
}

}  // namespace
}  // namespace flywheel
