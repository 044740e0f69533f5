#include "flywheel/actor/decode_graphs.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "flywheel/model/test_util.h"

namespace flywheel {
namespace {

TEST(DecodeGraphsTest, BucketsPadRowsAndKeys) {
  const std::vector<std::pair<int64_t, int64_t>> batch = {
      {1, 1}, {2, 2}, {3, 4}, {5, 8}, {8, 8}, {9, 16}, {16, 16}, {17, 32}, {250, 256}, {256, 256}};
  for (const auto& [rows, bucket] : batch) EXPECT_EQ(DecodeBatchBucket(rows), bucket) << rows;
  const std::vector<std::pair<int64_t, int64_t>> attend = {
      {1, 128}, {128, 128}, {129, 256}, {1000, 1024}, {2048, 2048}, {2049, 4096}, {5000, 6144}};
  for (const auto& [keys, bucket] : attend) EXPECT_EQ(DecodeAttendBucket(keys), bucket) << keys;
}

// Logits of one decode token per row, computed the plain way: a batch of exactly those rows
// attending to exactly their keys.
torch::Tensor PlainDecode(const Transformer& model, KvCache& cache,
                          const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions,
                          const std::vector<int64_t>& slots) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t attend = *std::max_element(positions.begin(), positions.end()) + 1;
  const auto device = cache.device();
  const auto pos = torch::tensor(positions, torch::kInt64).view({n, 1}).to(device);
  const auto allowed =
      torch::arange(attend, pos.options()).view({1, 1, attend}) <= pos.unsqueeze(2);
  auto binding = cache.Bind(slots, positions, attend);
  return model->Logits(model
                           ->Hidden(torch::tensor(tokens, torch::kInt64).view({n, 1}).to(device),
                                    pos, allowed, &binding)
                           .select(1, 0));
}

// Three sequences prefilled into slots 0..2 of two caches; then decode steps over every subset
// shape (all rows in slot order, a gather of two, one alone) through the fixed-shape step in one
// cache and the plain step in the other: same logits, and the padding rows, which write into
// the scratch slot, never disturb the sequences' keys. Returns the graphs captured.
int64_t CheckFixedShapeStep(const torch::Device& device) {
  torch::NoGradGuard no_grad;
  auto made = MakeTransformer(testing::TinyModelOptions());
  EXPECT_TRUE(made.ok()) << made.status();
  Transformer model = *made;
  model->to(device);
  const auto on_device = torch::TensorOptions().device(device);
  KvCache fixed(model->options(), on_device, 4, 16);
  KvCache plain(model->options(), on_device, 4, 16);
  std::vector<int64_t> length = {5, 3, 7};
  for (int64_t s = 0; s < 3; ++s) {
    for (KvCache* cache : {&fixed, &plain}) {
      std::vector<int64_t> toks(length[s]);
      std::vector<int64_t> pos(length[s]);
      for (int64_t i = 0; i < length[s]; ++i) toks[i] = (7 * s + 3 * i) % 40, pos[i] = i;
      const auto p = torch::tensor(pos, torch::kInt64).view({1, length[s]}).to(device);
      const auto allowed =
          torch::arange(length[s], on_device.dtype(torch::kInt64)).view({1, 1, length[s]}) <=
          p.view({1, length[s], 1});
      auto binding = cache->Bind({s}, {0}, length[s]);
      model->Hidden(torch::tensor(toks, torch::kInt64).view({1, length[s]}).to(device), p, allowed,
                    &binding);
    }
  }
  DecodeGraphs graphs;
  const std::vector<std::vector<int64_t>> steps = {{0, 1, 2}, {2, 0}, {1}, {0, 1, 2}};
  for (size_t step = 0; step < steps.size(); ++step) {
    std::vector<int64_t> tokens, positions;
    for (int64_t s : steps[step]) {
      tokens.push_back((11 * step + s) % 40);
      positions.push_back(length[s]++);
    }
    const auto got =
        graphs.Forward(model, fixed, tokens, positions, steps[step], /*scratch_slot=*/3);
    const auto want = PlainDecode(model, plain, tokens, positions, steps[step]);
    EXPECT_EQ(got.sizes(), want.sizes());
    EXPECT_LT((got - want).abs().max().item<float>(), 1e-5) << "step " << step;
  }
  // Keys of sequence 0 at its positions are the plain cache's, padding rows notwithstanding.
  auto read_fixed = fixed.Bind({0}, {length[0]}, length[0]);
  auto read_plain = plain.Bind({0}, {length[0]}, length[0]);
  const auto zeros =
      torch::zeros({1, model->options().num_kv_heads, 0, model->options().HeadDim()}, on_device);
  const auto [kf, vf] = read_fixed.Update(0, zeros, zeros);
  const auto [kp, vp] = read_plain.Update(0, zeros, zeros);
  EXPECT_LT((kf - kp).abs().max().item<float>(), 1e-5);
  EXPECT_LT((vf - vp).abs().max().item<float>(), 1e-5);
  return graphs.captures();
}

TEST(DecodeGraphsTest, FixedShapeStepDecodesAsThePlainStep) {
  EXPECT_EQ(CheckFixedShapeStep(torch::kCPU), 0);  // no graph on a CPU: the same step, eagerly
}

// On a GPU (scripts/gpu-check) the steps are captured and replayed as CUDA graphs: one graph per
// shape of the four steps (3 rows in slot order twice, 2 rows gathered, 1 row gathered).
TEST(DecodeGraphsTest, CudaGraphReplayDecodesAsThePlainStep) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
#if !FLYWHEEL_CUDA
  GTEST_SKIP() << "built without CUDA";
#endif
  EXPECT_EQ(CheckFixedShapeStep(torch::Device(torch::kCUDA, 0)), 3);
}

TEST(DecodeGraphsTest, KeepsAtMostMaxGraphsAndDropsThemWhenTheCacheGrows) {
  torch::NoGradGuard no_grad;
  const Transformer model = *MakeTransformer(testing::TinyModelOptions());
  KvCache cache(model->options(), torch::TensorOptions(), 32, 200);
  DecodeGraphs graphs(/*max_graphs=*/2);
  auto step = [&](int64_t rows, int64_t position) {
    std::vector<int64_t> tokens(rows, 1), positions(rows, position), slots(rows);
    for (int64_t b = 0; b < rows; ++b) slots[b] = b;
    graphs.Forward(model, cache, tokens, positions, slots, /*scratch_slot=*/rows);
  };
  step(1, 0);
  step(3, 0);
  EXPECT_EQ(graphs.num_graphs(), 2);
  step(9, 0);  // a third shape: the least recently used goes
  EXPECT_EQ(graphs.num_graphs(), 2);
  step(9, 150);  // keys past 128: the cache grows to 256 positions, its tensors are new
  EXPECT_EQ(graphs.num_graphs(), 1);
}

}  // namespace
}  // namespace flywheel
