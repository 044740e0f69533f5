#include "flywheel/learner/data_parallel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <set>
#include <thread>

#include "flywheel/learner/parallel_test_util.h"

namespace flywheel {
namespace {

using testing::BatchForStep;
using testing::BitEqual;
using testing::MaxAbsDiff;
using testing::ParallelLearnerOptions;
using testing::ReferenceWeights;
using testing::RunRanks;
using testing::TinyPolicy;

std::vector<PackedMicroBatch> MicroBatchesWithTokens(const std::vector<int64_t>& tokens) {
  std::vector<PackedMicroBatch> out;
  for (int64_t t : tokens) {
    PackedMicroBatch mb;
    mb.real_tokens = t;
    out.push_back(mb);
  }
  return out;
}

TEST(AssignMicroBatchesTest, SameCountPerRankBalancedByTokensPaddedWithMinusOne) {
  const auto mbs = MicroBatchesWithTokens({30, 10, 32, 5, 31, 20, 8});
  const auto shares = AssignMicroBatches(mbs, 3);
  ASSERT_EQ(shares.size(), 3u);
  std::multiset<int64_t> seen;
  std::vector<int64_t> tokens;
  for (const auto& share : shares) {
    EXPECT_EQ(share.size(), 3u);  // ceil(7 / 3)
    int64_t sum = 0;
    for (int64_t i : share) {
      if (i >= 0) {
        seen.insert(i);
        sum += mbs[i].real_tokens;
      }
    }
    tokens.push_back(sum);
  }
  EXPECT_EQ(seen, (std::multiset<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  // Largest first to the lightest rank: 32 | 31 | 30, then 20 → rank 2, 10 → rank 1, 8 → 0, 5.
  EXPECT_LE(*std::max_element(tokens.begin(), tokens.end()) -
                *std::min_element(tokens.begin(), tokens.end()),
            10);
  int padding = 0;
  for (const auto& share : shares) padding += std::count(share.begin(), share.end(), -1);
  EXPECT_EQ(padding, 2);

  // Fewer micro-batches than ranks: one each, the rest pure padding.
  const auto few = AssignMicroBatches(MicroBatchesWithTokens({3}), 2);
  EXPECT_THAT(few, ::testing::ElementsAre(std::vector<int64_t>{0}, std::vector<int64_t>{-1}));
}

TEST(ZeroWeightMicroBatchTest, KeepsTheShapeTrainsNothing) {
  PackedMicroBatch mb;
  mb.rows = 2;
  mb.length = 4;
  mb.tokens = torch::ones({2, 4}, torch::kLong);
  mb.targets = torch::ones({2, 4}, torch::kLong);
  mb.trainable = torch::ones({2, 4}, torch::kBool);
  mb.loss_weights = torch::full({2, 4}, 0.125f);
  mb.advantages = torch::ones({2, 4});
  mb.behaviour_logprobs = -torch::ones({2, 4});
  mb.doc_lengths = {{4}, {2, 2}};
  mb.real_tokens = 8;
  const PackedMicroBatch pad = ZeroWeightMicroBatch(mb);
  EXPECT_EQ(pad.tokens.sizes(), mb.tokens.sizes());
  EXPECT_EQ(pad.doc_lengths, mb.doc_lengths);
  EXPECT_EQ(pad.trainable.sum().item<int64_t>(), 0);
  EXPECT_EQ(pad.loss_weights.abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(pad.real_tokens, 0);
  EXPECT_EQ(mb.loss_weights.sum().item<float>(), 1.0f);  // the original is untouched
}

TEST(GradientReducerTest, SumsAccumulatedGradientsOverRanksInBuckets) {
  // Rank r: two micro-batches of a 3-layer MLP with inputs depending on r. After Finish every
  // rank holds Σ_r of its accumulated gradients, as one process running all four would.
  auto build = [] {
    torch::manual_seed(11);
    return torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Tanh(),
                                 torch::nn::Linear(16, 16), torch::nn::Tanh(),
                                 torch::nn::Linear(16, 1));
  };
  auto input = [](int rank, int k) {
    return torch::sin(torch::arange(32, torch::kFloat).view({4, 8}) * (1 + rank) + k);
  };
  torch::set_num_threads(1);
  torch::nn::Sequential reference = build();
  for (int rank = 0; rank < 2; ++rank) {
    for (int k = 0; k < 2; ++k) reference->forward(input(rank, k)).sum().backward();
  }
  // Built here, not on the rank threads: manual_seed and the initialisers share torch's global
  // generator, and two threads drawing from it at once would get different weights.
  std::vector<torch::nn::Sequential> models = {build(), build()};
  RunRanks(2, [&](int rank, dist::Communicator& comm) {
    torch::nn::Sequential model = models[rank];
    GradientReducer reducer(model->parameters(), /*bucket_bytes=*/64);
    EXPECT_GT(reducer.num_buckets(), 2);
    // The first bucket holds the last layer's parameters (reverse registration order).
    EXPECT_EQ(reducer.bucket_parameters(0).front(),
              static_cast<int64_t>(model->parameters().size()) - 1);
    model->forward(input(rank, 0)).sum().backward();
    reducer.Arm(&comm);
    model->forward(input(rank, 1)).sum().backward();
    auto stats = reducer.Finish();
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->buckets, reducer.num_buckets());
    EXPECT_GE(stats->launched_during_backward, 1);
    const auto params = model->parameters();
    const auto expected = reference->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::allclose(params[i].grad(), expected[i].grad(), 1e-6, 1e-6)) << i;
    }
  });
}

struct DataParallelRun {
  std::vector<std::vector<torch::Tensor>> weights;  // per rank
  std::vector<LearnerStepResult> last;              // per rank
};

DataParallelRun RunDataParallel(const LearnerOptions& options, int world_size, int64_t steps) {
  DataParallelRun run;
  run.weights.resize(world_size);
  run.last.resize(world_size);
  std::vector<std::unique_ptr<TinyPolicy>> policies;
  for (int r = 0; r < world_size; ++r) policies.push_back(std::make_unique<TinyPolicy>());
  RunRanks(world_size, [&](int rank, dist::Communicator& comm) {
    TinyPolicy& policy = *policies[rank];
    LearnerStep learner(options, testing::kParallelRunSteps, policy.Parameters(), policy.Forward(),
                        nullptr, 1.0, RealClock(), 0, ParallelContext{&comm, policy.Units()});
    for (int64_t s = 0; s < steps; ++s) {
      auto result = learner.Step(BatchForStep(s));
      ASSERT_TRUE(result.ok()) << "rank " << rank << ": " << result.status();
      run.last[rank] = *std::move(result);
    }
    run.weights[rank] = policy.Weights();
  });
  return run;
}

const char* LossName(PolicyLossKind loss) {
  for (const auto& c : kPolicyLossKindNames) {
    if (c.value == loss) return c.name.data();
  }
  return "?";
}

class DataParallelTest : public ::testing::TestWithParam<std::tuple<PolicyLossKind, int>> {};

TEST_P(DataParallelTest, FiveStepsEqualSingleProcessTraining) {
  const auto [loss, world_size] = GetParam();
  const LearnerOptions options = ParallelLearnerOptions(loss);
  const std::vector<torch::Tensor> initial = TinyPolicy().Weights();
  const std::vector<torch::Tensor> reference = ReferenceWeights(options, 5);
  const double moved = MaxAbsDiff(reference, initial);
  ASSERT_GT(moved, 1e-4) << "the reference barely trained; the comparison would be vacuous";

  const DataParallelRun run = RunDataParallel(options, world_size, 5);
  const double diff = MaxAbsDiff(run.weights[0], reference);
  std::printf("[ data parallel ] loss %s, N = %d: max |w - w_ref| = %.3g (weights moved %.3g)\n",
              LossName(loss), world_size, diff, moved);
  EXPECT_LT(diff, 1e-5);
  for (int r = 1; r < world_size; ++r) {
    EXPECT_TRUE(BitEqual(run.weights[r], run.weights[0])) << "rank " << r << " diverged";
  }
  const LearnerStepResult& last = run.last[0];
  EXPECT_EQ(last.world_size, world_size);
  EXPECT_EQ(last.rank_micro_batches, (last.micro_batches + world_size - 1) / world_size);
  for (int r = 0; r < world_size; ++r) {
    EXPECT_EQ(run.last[r].rank, r);
    EXPECT_EQ(run.last[r].rank_micro_batches, last.rank_micro_batches);
    EXPECT_GT(run.last[r].comm_bytes, 0);
  }
  EXPECT_GT(last.comm.buckets, 1);
  EXPECT_GE(last.comm.launched_during_backward, 1);
  std::printf(
      "[ data parallel ] rank 0: %lld of %lld micro-batches, %lld bytes sent, %lld "
      "buckets (%lld launched during backward), comm %.3g ms, overlap %.2f\n",
      static_cast<long long>(last.rank_micro_batches), static_cast<long long>(last.micro_batches),
      static_cast<long long>(last.comm_bytes), static_cast<long long>(last.comm.buckets),
      static_cast<long long>(last.comm.launched_during_backward), 1e3 * last.comm.comm_seconds,
      last.comm.overlap());
}

INSTANTIATE_TEST_SUITE_P(LossesAndWorldSizes, DataParallelTest,
                         ::testing::Combine(::testing::Values(PolicyLossKind::kTruncatedIs,
                                                              PolicyLossKind::kPpoClip,
                                                              PolicyLossKind::kDecoupledPpo),
                                            ::testing::Values(2, 4)));

TEST(DataParallelFailureTest, ARankWhoseForwardFailsMakesItsPeersFailWithinTheTimeout) {
  const LearnerOptions options = ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo);
  auto store = c10::make_intrusive<c10d::HashStore>();
  const auto start = std::chrono::steady_clock::now();
  std::vector<absl::Status> status(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      torch::set_num_threads(1);
      dist::CommunicatorOptions co;
      co.timeout = std::chrono::milliseconds(2000);
      auto comm = dist::Communicator::Create(store, rank, 2, co);
      ASSERT_TRUE(comm.ok()) << comm.status();
      TinyPolicy policy;
      PolicyForward forward = policy.Forward();
      if (rank == 1) {
        forward = [](const PackedMicroBatch&) -> absl::StatusOr<torch::Tensor> {
          return absl::InternalError("out of memory");
        };
      }
      LearnerStep learner(options, 10, policy.Parameters(), forward, nullptr, 1.0, RealClock(), 0,
                          ParallelContext{comm->get(), policy.Units()});
      const std::vector<torch::Tensor> before = policy.Weights();
      status[rank] = learner.Step(BatchForStep(0)).status();
      EXPECT_EQ(learner.version(), 0);
      EXPECT_TRUE(BitEqual(policy.Weights(), before)) << "rank " << rank << " stepped";
      if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_THAT(status[1].message(), ::testing::HasSubstr("out of memory"));
  EXPECT_FALSE(status[0].ok());
  EXPECT_THAT(status[0].message(), ::testing::HasSubstr("all-reduce")) << status[0];
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(DataParallelMembershipTest, GroupsOfTwoThenThreeThenTwoContinueTheSameTraining) {
  const LearnerOptions options = ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo);
  const std::vector<torch::Tensor> reference = ReferenceWeights(options, 6);

  // Three learners; member 2 joins for steps 2-3 (it gets the state by broadcast), member 0
  // leaves for steps 4-5. A fresh group (store, communicators) per membership epoch.
  std::vector<std::unique_ptr<TinyPolicy>> policies;
  std::vector<std::unique_ptr<LearnerStep>> learners;
  for (int m = 0; m < 3; ++m) {
    policies.push_back(std::make_unique<TinyPolicy>(/*seed=*/7 + m));  // member 2 starts wrong
    learners.push_back(std::make_unique<LearnerStep>(
        options, testing::kParallelRunSteps, policies[m]->Parameters(), policies[m]->Forward(),
        nullptr, 1.0, RealClock(), 0, ParallelContext{nullptr, policies[m]->Units()}));
  }
  struct Epoch {
    std::vector<int> members;  // rank i is member members[i]
    int64_t first_step;
    bool broadcast;
  };
  // Member 1 starts with member 0's weights (same seed), as a launch would give them.
  policies[1] = std::make_unique<TinyPolicy>(7);
  learners[1] = std::make_unique<LearnerStep>(
      options, testing::kParallelRunSteps, policies[1]->Parameters(), policies[1]->Forward(),
      nullptr, 1.0, RealClock(), 0, ParallelContext{nullptr, policies[1]->Units()});
  const std::vector<Epoch> epochs = {{{0, 1}, 0, false}, {{0, 1, 2}, 2, true}, {{1, 2}, 4, false}};
  for (const Epoch& epoch : epochs) {
    const int size = static_cast<int>(epoch.members.size());
    RunRanks(size, [&](int rank, dist::Communicator& comm) {
      LearnerStep& learner = *learners[epoch.members[rank]];
      ASSERT_TRUE(learner.SetCommunicator(&comm).ok());
      if (epoch.broadcast) {
        ASSERT_TRUE(learner.BroadcastState(/*root=*/0).ok());
      }
      for (int64_t s = epoch.first_step; s < epoch.first_step + 2; ++s) {
        auto result = learner.Step(BatchForStep(s));
        ASSERT_TRUE(result.ok()) << result.status();
        EXPECT_EQ(result->world_size, size);
      }
      ASSERT_TRUE(learner.SetCommunicator(nullptr).ok());  // the group goes away
    });
  }
  EXPECT_EQ(learners[2]->version(), 6);
  const double diff = MaxAbsDiff(policies[1]->Weights(), reference);
  std::printf("[ membership ] 2 → 3 → 2 ranks, 6 steps: max |w - w_ref| = %.3g\n", diff);
  EXPECT_LT(diff, 1e-5);
  EXPECT_TRUE(BitEqual(policies[2]->Weights(), policies[1]->Weights()));
}

}  // namespace
}  // namespace flywheel
