#include "flywheel/model/kv_cache.h"

#include <gtest/gtest.h>

#include "flywheel/model/test_util.h"
#include "flywheel/model/transformer.h"

namespace flywheel {
namespace {

ModelOptions TinyCached() {
  ModelOptions o = testing::TinyModelOptions();
  o.max_seq_len = 1024;
  return o;
}

// Prefills each sequence alone, then decodes all of them together, one token per step, each
// at its own length; every step's logits must equal a full recomputation of that sequence.
void CheckCachedDecode(const ModelOptions& options) {
  c10::InferenceMode guard;
  auto model = *MakeTransformer(options);
  for (auto& item : model->named_parameters()) {  // per-head norms start at one
    if (item.key().ends_with("q_norm.weight") || item.key().ends_with("k_norm.weight")) {
      item.value().uniform_(0.5, 1.5);
    }
  }
  const std::vector<int64_t> prompt_lengths = {3, 9, 1, 6};
  // Slots deliberately not in row order (exercises the gathered read), small initial capacity
  // (exercises growth).
  const std::vector<int64_t> slots = {2, 0, 3, 1};
  KvCache cache(model->options(), torch::kFloat32, /*initial_slots=*/2, /*initial_capacity=*/4);
  std::vector<std::vector<int64_t>> seqs;
  for (size_t b = 0; b < prompt_lengths.size(); ++b) {
    const auto t = torch::randint(40, {prompt_lengths[b]}, torch::kInt64);
    seqs.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  }
  cache.Reserve(4, 16);
  for (size_t b = 0; b < seqs.size(); ++b) {
    const int64_t n = static_cast<int64_t>(seqs[b].size());
    auto binding = cache.Bind({slots[b]}, {0}, n);
    const auto layout = CausalLayout(1, n);
    model->Hidden(torch::tensor(seqs[b]).unsqueeze(0), layout.positions, layout.allowed, &binding);
  }
  for (int step = 0; step < 12; ++step) {
    const int64_t rows = static_cast<int64_t>(seqs.size());
    // Each sequence gets one new token and decodes it at its own position len-1.
    for (auto& s : seqs) s.push_back((s.back() * 7 + step) % 40);
    std::vector<int64_t> starts, last;
    int64_t longest = 0;
    for (const auto& s : seqs) {
      starts.push_back(static_cast<int64_t>(s.size()) - 1);
      last.push_back(s.back());
      longest = std::max<int64_t>(longest, s.size());
    }
    cache.Reserve(4, longest);
    auto binding = cache.Bind(slots, starts, longest);
    const auto positions = torch::tensor(starts).unsqueeze(1);
    const auto allowed =
        (torch::arange(longest).unsqueeze(0) <= positions).unsqueeze(1);  // [B, 1, Lk]
    const auto cached = model->Logits(
        model->Hidden(torch::tensor(last).unsqueeze(1), positions, allowed, &binding));
    for (int64_t b = 0; b < rows; ++b) {
      const int64_t n = static_cast<int64_t>(seqs[b].size());
      const auto full = model->forward(torch::tensor(seqs[b]).unsqueeze(0), CausalLayout(1, n));
      EXPECT_TRUE(torch::allclose(cached[b][0], full[0][n - 1], 1e-5, 1e-5))
          << "step " << step << " row " << b << " max diff "
          << (cached[b][0] - full[0][n - 1]).abs().max().item<float>();
    }
  }
  EXPECT_GE(cache.capacity(), 21);
}

TEST(KvCacheTest, CachedDecodeEqualsFullRecomputationAtDifferentLengths) {
  CheckCachedDecode(TinyCached());
}

// q/k norms, head_dim apart from hidden / heads, llama3 rope scaling.
TEST(KvCacheTest, Qwen3ShapeCachedDecodeEqualsFullRecomputation) {
  ModelOptions o = testing::TinyQwen3StyleOptions();
  o.max_seq_len = 1024;
  CheckCachedDecode(o);
}

TEST(KvCacheTest, MoveSlotCarriesTheKeys) {
  c10::InferenceMode guard;
  auto model = *MakeTransformer(TinyCached());
  KvCache cache(model->options(), torch::kFloat32, 2, 8);
  const auto tokens = torch::randint(40, {1, 5}, torch::kInt64);
  const auto layout = CausalLayout(1, 5);
  auto bind1 = cache.Bind({1}, {0}, 5);
  model->Hidden(tokens, layout.positions, layout.allowed, &bind1);
  cache.MoveSlot(1, 0, 5);
  // Decode one more token from slot 0 and from a full recomputation.
  auto bind0 = cache.Bind({0}, {5}, 6);
  const auto next = torch::tensor({{7}}, torch::kInt64);
  const auto cached = model->Logits(
      model->Hidden(next, torch::tensor({{5}}), torch::ones({1, 1, 6}, torch::kBool), &bind0));
  const auto all = torch::cat({tokens, next}, 1);
  const auto full = model->forward(all, CausalLayout(1, 6));
  EXPECT_TRUE(torch::allclose(cached[0][0], full[0][5], 1e-5, 1e-5));
}

}  // namespace
}  // namespace flywheel
