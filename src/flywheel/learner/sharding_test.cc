#include "flywheel/learner/sharding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>

#include "flywheel/learner/parallel_test_util.h"

namespace flywheel {
namespace {

using testing::BatchForStep;
using testing::BitEqual;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MaxAbsDiff;
using testing::ParallelLearnerOptions;
using testing::ReferenceWeights;
using testing::RunRanks;
using testing::TinyPolicy;

TEST(TransformerUnitsTest, OneUnitPerLayerAndARootUnit) {
  const std::vector<std::string> names = {"model.embed_tokens.weight",
                                          "model.layers.0.self_attn.q_proj.weight",
                                          "model.layers.0.mlp.up_proj.weight",
                                          "model.layers.1.input_layernorm.weight",
                                          "model.norm.weight",
                                          "lm_head.weight"};
  const std::vector<ShardUnit> units = TransformerUnits(names);
  ASSERT_EQ(units.size(), 3u);
  EXPECT_EQ(units[0].name, "root");
  EXPECT_THAT(units[0].parameters, ElementsAre(0, 4, 5));
  EXPECT_EQ(units[1].name, "layers.0");
  EXPECT_THAT(units[1].parameters, ElementsAre(1, 2));
  EXPECT_EQ(units[2].name, "layers.1");
  EXPECT_TRUE(ValidateUnits(units, 6).ok());
  EXPECT_THAT(ValidateUnits(units, 7).message(), HasSubstr("parameter 6"));
}

TEST(FlattenTest, PadsAndRoundTrips) {
  const torch::Tensor a = torch::arange(6, torch::kFloat).view({2, 3});
  const torch::Tensor b = torch::arange(3, torch::kFloat) + 10;
  const torch::Tensor flat = FlattenTensors(std::vector<torch::Tensor>{a, b}, 12);
  EXPECT_EQ(flat.numel(), 12);
  EXPECT_EQ(flat.narrow(0, 9, 3).abs().sum().item<float>(), 0.0f);  // padding
  torch::Tensor a2 = torch::zeros({2, 3}), b2 = torch::zeros({3});
  UnflattenInto(flat, std::vector<torch::Tensor>{a2, b2});
  EXPECT_TRUE(torch::equal(a2, a));
  EXPECT_TRUE(torch::equal(b2, b));
  EXPECT_EQ(ShardLength(9, 4), 3);
  EXPECT_EQ(ShardLength(8, 4), 2);
}

TEST(FlatShardsTest, ReduceScattersGradientsAndGathersParameters) {
  RunRanks(2, [](int rank, dist::Communicator& comm) {
    // One unit of 5 elements: padded to 6, 3 per rank.
    torch::Tensor a = torch::tensor({1.f, 2.f, 3.f}).requires_grad_(true);
    torch::Tensor b = torch::tensor({4.f, 5.f}).requires_grad_(true);
    auto shards = FlatShards::Create({a, b}, SingleUnit(2), 2, rank);
    ASSERT_TRUE(shards.ok()) << shards.status();
    const torch::Tensor shard = (*shards)->shards()[0];
    EXPECT_TRUE(torch::equal(shard.detach(), rank == 0 ? torch::tensor({1.f, 2.f, 3.f})
                                                       : torch::tensor({4.f, 5.f, 0.f})));
    a.mutable_grad() = torch::full({3}, 1.f + rank);
    b.mutable_grad() = torch::full({2}, 10.f * (1 + rank));
    ASSERT_TRUE((*shards)->ReduceScatterGrads(comm).ok());
    EXPECT_FALSE(a.grad().defined());  // only the shard stays
    EXPECT_TRUE(torch::equal(shard.grad(),
                             rank == 0 ? torch::full({3}, 3.f) : torch::tensor({30.f, 30.f, 0.f})));
    {
      torch::NoGradGuard no_grad;
      shard.add_(100.f * (rank + 1));
    }
    ASSERT_TRUE((*shards)->AllGatherParams(comm).ok());
    EXPECT_TRUE(torch::equal(a.detach(), torch::tensor({101.f, 102.f, 103.f})));
    EXPECT_TRUE(torch::equal(b.detach(), torch::tensor({204.f, 205.f})));
  });
}

class ShardedTrainingTest : public ::testing::TestWithParam<std::tuple<PolicyLossKind, int>> {};

TEST_P(ShardedTrainingTest, GradsOptimizerShardingEqualsSingleProcessWithAQuarterOfTheState) {
  const auto [loss, world_size] = GetParam();
  LearnerOptions options = ParallelLearnerOptions(loss);
  const std::vector<torch::Tensor> reference = ReferenceWeights(options, 5);
  options.sharding = ShardingMode::kGradsOptimizer;

  std::vector<std::vector<torch::Tensor>> weights(world_size);
  std::vector<LearnerStepResult> last(world_size);
  RunRanks(world_size, [&](int rank, dist::Communicator& comm) {
    TinyPolicy policy;
    LearnerStep learner(options, testing::kParallelRunSteps, policy.Parameters(), policy.Forward(),
                        nullptr, 1.0, RealClock(), 0, ParallelContext{&comm, policy.Units()});
    for (int64_t s = 0; s < 5; ++s) {
      auto result = learner.Step(BatchForStep(s));
      ASSERT_TRUE(result.ok()) << "rank " << rank << ": " << result.status();
      last[rank] = *std::move(result);
    }
    weights[rank] = policy.Weights();
  });
  const double diff = MaxAbsDiff(weights[0], reference);
  EXPECT_LT(diff, 1e-5);
  for (int r = 1; r < world_size; ++r) EXPECT_TRUE(BitEqual(weights[r], weights[0])) << r;

  // Unsharded, a rank holds P bytes of parameters, P of gradients, 2P of AdamW moments.
  int64_t p_bytes = 0;
  for (const torch::Tensor& w : reference) p_bytes += w.numel() * w.element_size();
  std::printf(
      "[ grads_optimizer ] N = %d: max |w - w_ref| = %.3g; unsharded per rank: params "
      "%lld, grads %lld, optimizer %lld bytes\n",
      world_size, diff, static_cast<long long>(p_bytes), static_cast<long long>(p_bytes),
      static_cast<long long>(2 * p_bytes));
  for (int r = 0; r < world_size; ++r) {
    const LearnerStepResult& res = last[r];
    std::printf(
        "[ grads_optimizer ]   rank %d holds params %lld, grads %lld, optimizer %lld "
        "bytes (grads + optimizer = %.4f of unsharded)\n",
        r, static_cast<long long>(res.param_bytes), static_cast<long long>(res.grad_bytes),
        static_cast<long long>(res.optimizer_bytes),
        static_cast<double>(res.grad_bytes + res.optimizer_bytes) / (3.0 * p_bytes));
    EXPECT_EQ(res.param_bytes, p_bytes);  // ZeRO-2 keeps the parameters replicated
    // 1/N of the rest, plus at most one padding element per unit and tensor.
    EXPECT_NEAR(static_cast<double>(res.grad_bytes), static_cast<double>(p_bytes) / world_size,
                3 * 4.0);
    EXPECT_NEAR(static_cast<double>(res.optimizer_bytes),
                2.0 * static_cast<double>(p_bytes) / world_size, 2 * 3 * 4.0);
    EXPECT_GT(res.comm_bytes, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(LossesAndWorldSizes, ShardedTrainingTest,
                         ::testing::Combine(::testing::Values(PolicyLossKind::kTruncatedIs,
                                                              PolicyLossKind::kDecoupledPpo),
                                            ::testing::Values(2, 4)));

class FullyShardedTrainingTest : public ::testing::TestWithParam<std::tuple<PolicyLossKind, int>> {
};

TEST_P(FullyShardedTrainingTest, FullShardingEqualsSingleProcessWithAQuarterOfEverything) {
  const auto [loss, world_size] = GetParam();
  LearnerOptions options = ParallelLearnerOptions(loss);
  const std::vector<torch::Tensor> reference = ReferenceWeights(options, 5);
  options.sharding = ShardingMode::kFull;

  std::vector<std::vector<torch::Tensor>> weights(world_size);
  std::vector<LearnerStepResult> last(world_size);
  RunRanks(world_size, [&](int rank, dist::Communicator& comm) {
    TinyPolicy policy;
    LearnerStep learner(options, testing::kParallelRunSteps, policy.Parameters(), policy.Forward(),
                        nullptr, 1.0, RealClock(), 0,
                        ParallelContext{&comm, policy.Units(), policy.model.get()});
    // Between steps the model's parameters hold no storage: only the shards do.
    for (const torch::Tensor& p : policy.Parameters()) ASSERT_EQ(p.numel(), 0);
    for (int64_t s = 0; s < 5; ++s) {
      auto result = learner.Step(BatchForStep(s));
      ASSERT_TRUE(result.ok()) << "rank " << rank << ": " << result.status();
      last[rank] = *std::move(result);
    }
    auto full = learner.FullParameters();
    ASSERT_TRUE(full.ok()) << full.status();
    weights[rank] = *full;
  });
  const double diff = MaxAbsDiff(weights[0], reference);
  EXPECT_LT(diff, 1e-5);
  for (int r = 1; r < world_size; ++r) EXPECT_TRUE(BitEqual(weights[r], weights[0])) << r;

  int64_t p_bytes = 0;
  for (const torch::Tensor& w : reference) p_bytes += w.numel() * w.element_size();
  std::printf(
      "[ full ] N = %d: max |w - w_ref| = %.3g; unsharded per rank: %lld bytes of "
      "params + grads + optimizer\n",
      world_size, diff, static_cast<long long>(4 * p_bytes));
  for (int r = 0; r < world_size; ++r) {
    const LearnerStepResult& res = last[r];
    const int64_t total = res.param_bytes + res.grad_bytes + res.optimizer_bytes;
    std::printf(
        "[ full ]   rank %d holds params %lld, grads %lld, optimizer %lld bytes (%.4f of "
        "unsharded)\n",
        r, static_cast<long long>(res.param_bytes), static_cast<long long>(res.grad_bytes),
        static_cast<long long>(res.optimizer_bytes), static_cast<double>(total) / (4.0 * p_bytes));
    // 1/N of each, plus at most one padding element per unit and tensor.
    EXPECT_NEAR(static_cast<double>(res.param_bytes), static_cast<double>(p_bytes) / world_size,
                3 * 4.0);
    EXPECT_NEAR(static_cast<double>(res.grad_bytes), static_cast<double>(p_bytes) / world_size,
                3 * 4.0);
    EXPECT_NEAR(static_cast<double>(res.optimizer_bytes),
                2.0 * static_cast<double>(p_bytes) / world_size, 2 * 3 * 4.0);
  }
}

INSTANTIATE_TEST_SUITE_P(LossesAndWorldSizes, FullyShardedTrainingTest,
                         ::testing::Combine(::testing::Values(PolicyLossKind::kTruncatedIs,
                                                              PolicyLossKind::kDecoupledPpo),
                                            ::testing::Values(2, 4)));

TEST(FullyShardedTrainingTest, FullShardingNeedsTheTransformer) {
  LearnerOptions options = ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo);
  options.sharding = ShardingMode::kFull;
  RunRanks(1, [&](int, dist::Communicator& comm) {
    TinyPolicy policy;
    LearnerStep learner(options, 10, policy.Parameters(), policy.Forward(), nullptr, 1.0,
                        RealClock(), 0, ParallelContext{&comm, policy.Units()});
    auto result = learner.Step(BatchForStep(0));
    ASSERT_FALSE(result.ok());
    EXPECT_THAT(result.status().message(), HasSubstr("learner.sharding = \"full\""));
  });
}

}  // namespace
}  // namespace flywheel
