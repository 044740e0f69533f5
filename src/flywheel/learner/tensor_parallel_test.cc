#include "flywheel/learner/tensor_parallel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "flywheel/learner/parallel_test_util.h"

namespace flywheel {
namespace {

using testing::BatchForStep;
using testing::BitEqual;
using ::testing::HasSubstr;
using testing::MaxAbsDiff;
using testing::ParallelLearnerOptions;
using testing::ReferenceWeights;
using testing::RunRanks;
using testing::TinyPolicy;

// Runs fn(rank, mesh) on `world_size` threads forming a DP x TP mesh over one HashStore.
void RunMesh(int world_size, int tensor_parallel, const std::function<void(int, DeviceMesh&)>& fn) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      torch::set_num_threads(1);
      dist::CommunicatorOptions options;
      options.timeout = std::chrono::milliseconds(60000);
      options.name = "test mesh";
      auto mesh = DeviceMesh::Form(store, rank, world_size, tensor_parallel, options);
      ASSERT_TRUE(mesh.ok()) << mesh.status();
      fn(rank, *mesh);
    });
  }
  for (auto& t : threads) t.join();
}

PolicyForward ForwardOf(const Transformer& model) {
  return [model](const PackedMicroBatch& mb) -> absl::StatusOr<torch::Tensor> {
    ASSIGN_OR_RETURN(AttentionLayout layout, MakePackedLayout(mb.doc_lengths, mb.length));
    return model->forward(mb.tokens, layout);
  };
}

TEST(TensorParallelOpsTest, CopyAndReduceAreConjugate) {
  RunRanks(2, [](int rank, dist::Communicator& comm) {
    const double w = rank + 1;  // rank-dependent downstream use
    // f: identity forward, gradients summed over the group: Σ_r (r + 1) = 3.
    torch::Tensor x = torch::arange(3, torch::kFloat).requires_grad_(true);
    torch::Tensor y = TensorParallelCopy(x, &comm);
    EXPECT_TRUE(torch::equal(y, x.detach()));
    (y * w).sum().backward();
    EXPECT_TRUE(torch::equal(x.grad(), torch::full({3}, 3.0f))) << x.grad();
    // g: values summed over the group, identity backward.
    torch::Tensor a = (torch::ones({3}) * w).requires_grad_(true);
    torch::Tensor z = TensorParallelReduce(a, &comm);
    EXPECT_TRUE(torch::equal(z, torch::full({3}, 3.0f))) << z;
    (z * w).sum().backward();
    EXPECT_TRUE(torch::equal(a.grad(), torch::full({3}, static_cast<float>(w)))) << a.grad();
  });
}

TEST(DeviceMeshTest, RanksFormATpGroupPerReplicaAndADpGroupPerTpIndex) {
  RunMesh(4, 2, [](int rank, DeviceMesh& mesh) {
    EXPECT_EQ(mesh.tp_index, rank % 2);
    EXPECT_EQ(mesh.dp_index, rank / 2);
    EXPECT_EQ(mesh.tp_group->size(), 2);
    EXPECT_EQ(mesh.dp_group->size(), 2);
    // Σ over the TP group of the global ranks: 0+1 or 2+3; over the DP group: 0+2 or 1+3.
    torch::Tensor tp = torch::tensor({static_cast<float>(rank)});
    torch::Tensor dp = tp.clone();
    ASSERT_TRUE(mesh.tp_group->AllReduceSumNow(tp).ok());
    ASSERT_TRUE(mesh.dp_group->AllReduceSumNow(dp).ok());
    EXPECT_EQ(tp.item<float>(), mesh.dp_index == 0 ? 1.0f : 5.0f) << mesh.DebugString();
    EXPECT_EQ(dp.item<float>(), mesh.tp_index == 0 ? 2.0f : 4.0f) << mesh.DebugString();
  });
}

// A packed micro-batch of two rows with several documents, for forward comparisons.
PackedMicroBatch SomeMicroBatch() {
  PackedMicroBatch mb;
  mb.rows = 2;
  mb.length = 16;
  mb.tokens = torch::randint(1, testing::kParallelVocab, {2, 16},
                             torch::TensorOptions().dtype(torch::kLong));
  mb.doc_lengths = {{5, 7, 4}, {9, 6}};
  return mb;
}

// Slices of `options`' model on 2 TP ranks: their packed forward is the full model's, the
// gradient of each slice is the slice of the full gradient (replicated parameters: the whole
// gradient), the global norm is the full one, and gathering gives the full model back.
void CheckSlices(const ModelOptions& options) {
  torch::manual_seed(5);
  const PackedMicroBatch mb = SomeMicroBatch();
  const torch::Tensor probe = torch::randn({2, 16, testing::kParallelVocab});
  RunRanks(2, [&](int rank, dist::Communicator& comm) {
    auto full = MakeTransformer(options);
    ASSERT_TRUE(full.ok()) << full.status();
    // q/k/v biases start at zero and the per-head norms at one: give them values, the same on
    // every rank (no global RNG), so that their slicing and gradients are checked.
    {
      torch::NoGradGuard no_grad;
      for (auto& item : (*full)->named_parameters()) {
        torch::Tensor& b = item.value();
        if (item.key().ends_with(".bias")) b.copy_(0.02 * torch::sin(torch::arange(b.numel())));
        if (item.key().ends_with("q_norm.weight") || item.key().ends_with("k_norm.weight")) {
          b.copy_(1 + 0.3 * torch::sin(torch::arange(b.numel()) + 1));
        }
      }
    }
    auto tp = TensorParallelModel::Create(**full, &comm);
    ASSERT_TRUE(tp.ok()) << tp.status();
    const auto sliced = (*tp)->model()->named_parameters();
    const int64_t head_dim = options.HeadDim();
    EXPECT_EQ(sliced["model.layers.0.self_attn.q_proj.weight"].sizes(),
              (std::vector<int64_t>{options.num_heads / 2 * head_dim, options.hidden_size}));
    EXPECT_EQ(sliced["model.layers.0.self_attn.k_proj.weight"].sizes(),
              (std::vector<int64_t>{options.num_kv_heads / 2 * head_dim, options.hidden_size}));
    EXPECT_EQ(sliced["model.layers.0.self_attn.o_proj.weight"].sizes(),
              (std::vector<int64_t>{options.hidden_size, options.num_heads / 2 * head_dim}));
    EXPECT_EQ(sliced["model.layers.1.mlp.down_proj.weight"].sizes(),
              (std::vector<int64_t>{options.hidden_size, options.intermediate_size / 2}));
    if (!options.tie_embeddings) {
      EXPECT_EQ(sliced["lm_head.weight"].sizes(),
                (*full)->named_parameters()["lm_head.weight"].sizes());
    }
    if (options.qk_norm) {  // replicated: whole on every rank
      EXPECT_EQ(sliced["model.layers.1.self_attn.q_norm.weight"].sizes(),
                (std::vector<int64_t>{head_dim}));
    }

    auto layout = MakePackedLayout(mb.doc_lengths, mb.length);
    ASSERT_TRUE(layout.ok());
    const torch::Tensor expected = (*full)->forward(mb.tokens, *layout);
    const torch::Tensor logits = (*tp)->model()->forward(mb.tokens, *layout);
    const double forward_diff = (logits - expected).abs().max().item<double>();
    std::printf("[ tensor parallel ] rank %d: max |logits - logits_full| = %.3g\n", rank,
                forward_diff);
    EXPECT_LT(forward_diff, 1e-5);

    // The gradient of each slice is the slice of the full model's gradient.
    (expected * probe).sum().backward();
    (logits * probe).sum().backward();
    const auto full_params = (*full)->parameters();
    const auto params = (*tp)->parameters();
    double grad_diff = 0;
    double grad_max = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      torch::Tensor want = full_params[i].grad();
      const TensorParallelSplit split = (*tp)->splits()[i];
      if (split != TensorParallelSplit::kReplicated) {
        const int64_t dim = split == TensorParallelSplit::kColumn ? 0 : 1;
        want = want.narrow(dim, rank * params[i].size(dim), params[i].size(dim));
      }
      grad_diff = std::max(grad_diff, (params[i].grad() - want).abs().max().item<double>());
      grad_max = std::max(grad_max, want.abs().max().item<double>());
    }
    std::printf(
        "[ tensor parallel ] rank %d: max |grad - grad_full slice| = %.3g (max |grad| %.3g)\n",
        rank, grad_diff, grad_max);
    EXPECT_LT(grad_diff, 1e-6 * grad_max);
    // The global norm: the same as the full model's on every rank.
    double full_sq = 0;
    for (const auto& p : full_params)
      full_sq += p.grad().to(torch::kDouble).pow(2).sum().item<double>();
    auto global_sq = (*tp)->GlobalGradSquareSum();
    ASSERT_TRUE(global_sq.ok()) << global_sq.status();
    EXPECT_NEAR(*global_sq, full_sq, 1e-6 * full_sq);

    auto gathered = (*tp)->FullParameters();
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    std::vector<torch::Tensor> original;
    for (const auto& p : full_params) original.push_back(p.detach());
    EXPECT_TRUE(BitEqual(*gathered, original)) << "the gathered model is not the full one";
  });
}

TEST(TensorParallelModelTest, SlicesComputeTheFullModelTheirGradientsAndGatherBack) {
  // Biases on q/k/v and an untied LM head, so that every kind of parameter is there.
  ModelOptions options = testing::ParallelModelOptions();
  options.attention_bias = true;
  options.tie_embeddings = false;
  CheckSlices(options);
}

TEST(TensorParallelModelTest, Qwen3ShapeSlicesTooWithPerHeadNormsReplicated) {
  // Qwen3: per-head q/k RMSNorm (replicated, acting on each rank's heads only), head_dim apart
  // from hidden_size / num_heads, and Llama 3 rope scaling.
  ModelOptions options = testing::ParallelModelOptions();
  options.qk_norm = true;
  options.head_dim = 12;
  options.rope_scaling.type = "llama3";
  options.rope_scaling.original_max_position_embeddings = 8;
  CheckSlices(options);
}

TEST(TensorParallelValidationTest, HeadsThatDoNotDivideAreRefusedNamingTheKeys) {
  LearnerOptions learner;
  learner.world_size = 4;
  learner.tensor_parallel = 4;
  ModelOptions model = testing::ParallelModelOptions();  // 4 heads, 2 kv heads, width 48
  absl::Status s = ValidateTensorParallel(learner, model);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("learner.tensor_parallel (4) must divide model.num_kv_heads"));
  std::printf("[ tensor parallel ] refused: %s\n", std::string(s.message()).c_str());
  learner.tensor_parallel = 2;
  EXPECT_TRUE(ValidateTensorParallel(learner, model).ok());
  model.intermediate_size = 51;
  EXPECT_THAT(ValidateTensorParallel(learner, model).message(),
              HasSubstr("model.intermediate_size (51)"));
  model = testing::ParallelModelOptions();
  model.num_heads = 2;
  model.num_kv_heads = 1;
  model.hidden_size = 32;
  EXPECT_THAT(ValidateTensorParallel(learner, model).message(),
              HasSubstr("model.num_kv_heads (1)"));
  learner.world_size = 3;
  EXPECT_THAT(ValidateTensorParallel(learner, model).message(),
              HasSubstr("must divide learner.world_size (3)"));
  learner.world_size = 4;
  learner.sharding = ShardingMode::kGradsOptimizer;
  EXPECT_THAT(ValidateTensorParallel(learner, testing::ParallelModelOptions()).message(),
              HasSubstr("learner.sharding"));

  // The slice itself refuses too: 4 ranks over 2 kv heads.
  RunRanks(4, [](int, dist::Communicator& comm) {
    TinyPolicy policy;
    auto tp = TensorParallelModel::Create(*policy.model, &comm);
    EXPECT_EQ(tp.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(tp.status().message(), HasSubstr("model.num_kv_heads (2)"));
  });
  // And a learner told tensor_parallel = 2 without the slice.
  LearnerOptions options = ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo);
  options.tensor_parallel = 2;
  options.world_size = 2;
  TinyPolicy policy;
  LearnerStep learner_step(options, testing::kParallelRunSteps, policy.Parameters(),
                           policy.Forward());
  EXPECT_THAT(learner_step.Step(BatchForStep(0)).status().message(),
              HasSubstr("ParallelContext.tensor_parallel"));
}

const char* LossName(PolicyLossKind loss) {
  for (const auto& c : kPolicyLossKindNames) {
    if (c.value == loss) return c.name.data();
  }
  return "?";
}

struct MeshRun {
  std::vector<std::vector<torch::Tensor>> full_weights;  // per rank, FullParameters()
  std::vector<LearnerStepResult> last;                   // per rank
};

MeshRun RunTensorParallel(LearnerOptions options, int world_size, int tensor_parallel,
                          int64_t steps) {
  options.world_size = world_size;
  options.tensor_parallel = tensor_parallel;
  MeshRun run;
  run.full_weights.resize(world_size);
  run.last.resize(world_size);
  RunMesh(world_size, tensor_parallel, [&](int rank, DeviceMesh& mesh) {
    std::unique_ptr<TensorParallelModel> tp;
    {
      TinyPolicy full;  // every rank starts from the same full model and keeps only its slices
      auto created = TensorParallelModel::Create(*full.model, mesh.tp_group.get());
      ASSERT_TRUE(created.ok()) << created.status();
      tp = *std::move(created);
    }
    dist::Communicator* dp = mesh.data_parallel > 1 ? mesh.dp_group.get() : nullptr;
    LearnerStep learner(options, testing::kParallelRunSteps, tp->parameters(),
                        ForwardOf(tp->model()), nullptr, 1.0, RealClock(), 0,
                        ParallelContext{dp, {}, nullptr, tp.get()});
    for (int64_t s = 0; s < steps; ++s) {
      auto result = learner.Step(BatchForStep(s));
      ASSERT_TRUE(result.ok()) << "rank " << rank << ": " << result.status();
      run.last[rank] = *std::move(result);
    }
    auto weights = learner.FullParameters();
    ASSERT_TRUE(weights.ok()) << weights.status();
    run.full_weights[rank] = *std::move(weights);
  });
  return run;
}

class TensorParallelLearnerTest
    : public ::testing::TestWithParam<std::tuple<PolicyLossKind, std::pair<int, int>>> {};

TEST_P(TensorParallelLearnerTest, FiveStepsEqualSingleProcessTraining) {
  const auto [loss, shape] = GetParam();
  const auto [world_size, tensor_parallel] = shape;
  const LearnerOptions options = ParallelLearnerOptions(loss);
  const std::vector<torch::Tensor> initial = TinyPolicy().Weights();
  const std::vector<torch::Tensor> reference = ReferenceWeights(options, 5);
  const double moved = MaxAbsDiff(reference, initial);
  ASSERT_GT(moved, 1e-4) << "the reference barely trained; the comparison would be vacuous";

  const MeshRun run = RunTensorParallel(options, world_size, tensor_parallel, 5);
  double diff = 0;
  for (int r = 0; r < world_size; ++r) {
    ASSERT_EQ(run.full_weights[r].size(), reference.size()) << "rank " << r;
    diff = std::max(diff, MaxAbsDiff(run.full_weights[r], reference));
  }
  std::printf(
      "[ tensor parallel ] loss %s, DP %d x TP %d: max |w - w_ref| over ranks = %.3g (weights "
      "moved %.3g)\n",
      LossName(loss), world_size / tensor_parallel, tensor_parallel, diff, moved);
  EXPECT_LT(diff, 1e-5);
  // The TP ranks of a replica all-reduce identical activations: their gathered models agree.
  for (int r = 1; r < world_size; ++r) {
    EXPECT_LT(MaxAbsDiff(run.full_weights[r], run.full_weights[0]), 1e-6) << "rank " << r;
  }
  for (int r = 0; r < world_size; ++r) {
    const LearnerStepResult& last = run.last[r];
    EXPECT_EQ(last.tensor_parallel, tensor_parallel);
    EXPECT_EQ(last.tp_rank, r % tensor_parallel);
    EXPECT_EQ(last.world_size, world_size / tensor_parallel);  // the DP group's
    EXPECT_EQ(last.rank, r / tensor_parallel);
    EXPECT_NEAR(last.optimizer.grad_norm, run.last[0].optimizer.grad_norm,
                1e-6 * run.last[0].optimizer.grad_norm);
  }
}

INSTANTIATE_TEST_SUITE_P(
    LossesAndMeshes, TensorParallelLearnerTest,
    ::testing::Combine(::testing::Values(PolicyLossKind::kDecoupledPpo, PolicyLossKind::kPpoClip),
                       ::testing::Values(std::pair<int, int>{2, 2}, std::pair<int, int>{4, 2})));

TEST(TensorParallelNormTest, GradientNormIsTheSingleProcessOne) {
  // The norm the clip uses (before clipping): sliced parameters over the TP group, the rest once.
  const LearnerOptions options = ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo);
  TinyPolicy policy;
  LearnerStep reference(options, testing::kParallelRunSteps, policy.Parameters(), policy.Forward());
  auto want = reference.Step(BatchForStep(0));
  ASSERT_TRUE(want.ok()) << want.status();
  const MeshRun run = RunTensorParallel(options, 2, 2, 1);
  std::printf("[ tensor parallel ] grad norm: TP 2 %.9g, one process %.9g\n",
              run.last[0].optimizer.grad_norm, want->optimizer.grad_norm);
  EXPECT_NEAR(run.last[0].optimizer.grad_norm, want->optimizer.grad_norm,
              1e-6 * want->optimizer.grad_norm);
}

}  // namespace
}  // namespace flywheel
