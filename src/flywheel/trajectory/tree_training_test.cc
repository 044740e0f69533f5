#include "flywheel/trajectory/tree_training.h"

#include <random>

#include <gtest/gtest.h>

#include "flywheel/model/transformer.h"
#include "flywheel/trajectory/path_selection.h"
#include "flywheel/trajectory/random_execution_testing.h"

namespace flywheel {
namespace {

// PPO-clip with the behaviour policy as the old policy, written out here on its own.
torch::Tensor PpoClip(const torch::Tensor& logp, const torch::Tensor& logmu,
                      const torch::Tensor& adv) {
  const torch::Tensor ratio = torch::exp(logp - logmu);
  return -torch::min(ratio * adv, torch::clamp(ratio, 0.8, 1.2) * adv);
}

struct Result {
  double loss;
  std::vector<torch::Tensor> grads;
};

Result LossAndGrads(Transformer& model, const PackedTrees& packed) {
  model->zero_grad();
  auto batch = ToTensors(packed);
  EXPECT_TRUE(batch.ok()) << batch.status();
  const torch::Tensor logits = model->forward(batch->tokens, batch->layout);
  const torch::Tensor logp = ContributionLogprobs(logits, *batch, SamplingParams{});
  const torch::Tensor loss = ContributionLoss(logp, *batch, PpoClip);
  loss.backward();
  Result r{loss.item<double>(), {}};
  for (const auto& p : model->parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

TEST(TreeTrainingTest, ExactTreeLossAndGradientsEqualFlatPaths) {
  ModelOptions options;
  options.vocab_size = 48;
  options.hidden_size = 32;
  options.num_layers = 2;
  options.num_heads = 4;
  options.num_kv_heads = 2;
  options.intermediate_size = 64;
  options.max_seq_len = 512;
  auto model = MakeTransformer(options);
  ASSERT_TRUE(model.ok()) << model.status();

  for (uint32_t seed = 1; seed <= 4; ++seed) {
    std::mt19937 rng(seed);
    std::vector<TrajectoryTree> trees;
    for (int i = 0; i < 3; ++i) {
      // One GRPO group: three executions from one prompt.
      auto tree = TrajectoryTree::FromExecution(testing::RandomExecution(
          rng, "e" + std::to_string(i), /*turns=*/8, {0, 3, 1, 4, 1, 5, 9, 2}));
      ASSERT_TRUE(tree.ok());
      trees.push_back(std::move(*tree));
    }
    std::vector<TreeTrainingItem> items;
    std::uniform_real_distribution<float> adv(-1.0f, 1.0f);
    for (const auto& tree : trees) {
      TreeTrainingItem item{&tree, SelectPaths(tree.Paths(), 0).selected, {}};
      for (size_t p = 0; p < item.paths.size(); ++p) item.advantages.push_back(adv(rng));
      items.push_back(std::move(item));
    }
    for (const int64_t group : {-1, 0}) {  // a tree per execution, one for the group
      for (auto& item : items) item.group = group;
      for (auto agg : {PathAggregation::kTokenMean, PathAggregation::kSequenceMean}) {
        auto tree = PackTrees(items, 320, TreeWeighting::kExact, agg);
        auto flat = PackFlatPaths(items, 160, agg);
        ASSERT_TRUE(tree.ok() && flat.ok());
        ASSERT_LT(tree->real_tokens, flat->real_tokens);  // there is sharing to exploit
        const Result t = LossAndGrads(*model, *tree);
        const Result f = LossAndGrads(*model, *flat);
        EXPECT_NEAR(t.loss, f.loss, 1e-5) << "seed " << seed << " group " << group;
        ASSERT_EQ(t.grads.size(), f.grads.size());
        for (size_t i = 0; i < t.grads.size(); ++i) {
          const double diff = (t.grads[i] - f.grads[i]).abs().max().item<double>();
          EXPECT_LT(diff, 1e-5) << "seed " << seed << " group " << group << " parameter " << i;
        }
      }
    }
  }
}

TEST(TreeTrainingTest, LogprobsAreReadAtTheParent) {
  // One path [BOS 5 | 7 8] with 7, 8 generated: their log-probs come from columns 1 and 2.
  Execution e;
  e.execution_id = "x";
  e.final_reward = 1.0f;
  e.calls = {testing::MakeCall("c", Role::kMain, {0, 5}, {7, 8})};
  auto tree = TrajectoryTree::FromExecution(e);
  ASSERT_TRUE(tree.ok());
  std::vector<TreeTrainingItem> items = {{&*tree, tree->Paths(), {1.0f}}};
  auto packed = PackTrees(items, 8, TreeWeighting::kExact, PathAggregation::kTokenMean);
  ASSERT_TRUE(packed.ok());
  auto batch = ToTensors(*packed);
  ASSERT_TRUE(batch.ok());
  EXPECT_TRUE(torch::equal(batch->source_cols, torch::tensor({1, 2}, torch::kInt64)));
  EXPECT_TRUE(torch::equal(batch->targets, torch::tensor({7, 8}, torch::kInt64)));
  // logits that put all mass on the right token give log-prob 0
  torch::Tensor logits = torch::full({1, 8, 10}, -30.0);
  logits.index_put_({0, 1, 7}, 30.0);
  logits.index_put_({0, 2, 8}, 30.0);
  const torch::Tensor logp = ContributionLogprobs(logits, *batch, SamplingParams{});
  EXPECT_LT(logp.abs().max().item<double>(), 1e-6);
}

}  // namespace
}  // namespace flywheel
