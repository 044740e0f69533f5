// The packed path end to end through the real transformer: several trajectories packed into
// rows (block-diagonal causal mask, positions restarting per document, PackedLayout) must give
// the loss and gradients of the same trajectories run one by one as plain causal sequences.
// This checks that no attention leaks across documents, that rotary positions restart, and that
// targets and masks line up with the logits that predict them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <random>

#include "flywheel/core/strings.h"
#include "flywheel/learner/losses.h"
#include "flywheel/learner/packer.h"
#include "flywheel/learner/token_logprobs.h"
#include "flywheel/model/attention_layout.h"
#include "flywheel/model/transformer.h"

namespace flywheel {
namespace {

constexpr int64_t kPackedVocab = 23;

Trajectory MakePacked(std::string id, int64_t prompt, int64_t generated, int seed) {
  Trajectory t;
  t.id = std::move(id);
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < prompt; ++i) t.AppendPrompt(static_cast<int32_t>(rng() % kPackedVocab));
  for (int64_t i = 0; i < generated; ++i) {
    t.AppendGenerated(static_cast<int32_t>(rng() % kPackedVocab), -2.0f - 0.1f * i, 0);
  }
  return t;
}

ModelOptions SmallModel() {
  ModelOptions m;
  m.vocab_size = kPackedVocab;
  m.hidden_size = 16;
  m.num_layers = 2;
  m.num_heads = 4;
  m.num_kv_heads = 2;  // grouped-query attention too
  m.intermediate_size = 24;
  m.max_seq_len = 64;
  m.seed = 3;
  return m;
}

TEST(PackedTransformerTest, PackedLossAndGradientsEqualOneByOne) {
  std::vector<Trajectory> batch;
  for (int i = 0; i < 6; ++i)
    batch.push_back(MakePacked(StrCat("t", i), 2 + i % 3, 3 + (7 * i) % 9, i));
  std::vector<std::vector<float>> adv;
  for (const Trajectory& t : batch) {
    std::vector<float> a(t.tokens.size());
    for (size_t j = 0; j < a.size(); ++j) a[j] = t.trainable[j] ? 0.3f * (j % 4) - 0.4f : 0.0f;
    adv.push_back(a);
  }
  auto packed_model = MakeTransformer(SmallModel());
  auto single_model = MakeTransformer(SmallModel());  // same seed: the same weights
  ASSERT_TRUE(packed_model.ok() && single_model.ok());

  PackerOptions po;
  po.buckets = {16, 32};
  po.token_budget = 64;
  Packer packer(po);
  auto step = packer.Pack(batch, adv);
  ASSERT_TRUE(step.ok()) << step.status();
  // Several documents share a row, or the test would not test packing.
  bool shared_row = false;
  for (const auto& mb : step->micro_batches) {
    for (const auto& docs : mb.doc_lengths) shared_row |= docs.size() > 1;
  }
  ASSERT_TRUE(shared_row);

  LossOptions options;
  options.kind = PolicyLossKind::kTruncatedIs;
  options.is_cap = 2.0;
  double packed_loss = 0;
  for (const PackedMicroBatch& mb : step->micro_batches) {  // gradient accumulation
    auto layout = MakePackedLayout(mb.doc_lengths, mb.length);
    ASSERT_TRUE(layout.ok()) << layout.status();
    PolicyLossInputs in;
    in.logprobs = TokenLogprobs((*packed_model)->forward(mb.tokens, *layout), mb.targets);
    in.proximal_logprobs = in.logprobs.detach();
    in.behaviour_logprobs = mb.behaviour_logprobs;
    in.advantages = mb.advantages;
    in.trainable = mb.trainable;
    in.loss_weights = mb.loss_weights;
    auto out = PolicyLoss(options, in);
    ASSERT_TRUE(out.ok()) << out.status();
    out->loss.backward();
    packed_loss += out->loss.item<double>();
  }

  // One by one, each trajectory a causal row of its own; the loss written out: token j is
  // predicted by the logits at j − 1, weight min(π/μ, 2), token mean over the step.
  torch::Tensor direct = torch::zeros({});
  const double n = static_cast<double>(step->trainable_tokens);
  for (size_t i = 0; i < batch.size(); ++i) {
    const Trajectory& t = batch[i];
    std::vector<int64_t> ids(t.tokens.begin(), t.tokens.end());
    const auto tokens = torch::tensor(ids, torch::kInt64).unsqueeze(0);
    const auto logp =
        torch::log_softmax((*single_model)->forward(tokens, CausalLayout(1, t.size()))[0], -1);
    for (int64_t j = 1; j < t.size(); ++j) {
      if (!t.trainable[j]) continue;
      const torch::Tensor lp = logp[j - 1][t.tokens[j]];
      const double w = std::min(std::exp(lp.item<double>() - t.logprobs[j]), 2.0);
      direct = direct - w * adv[i][j] * lp / n;
    }
  }
  direct.backward();
  EXPECT_NEAR(packed_loss, direct.item<double>(), 1e-5);

  const auto packed_params = (*packed_model)->named_parameters();
  const auto single_params = (*single_model)->named_parameters();
  ASSERT_EQ(packed_params.size(), single_params.size());
  for (const auto& p : packed_params) {
    const torch::Tensor a = p.value().grad();
    const torch::Tensor b = single_params[p.key()].grad();
    ASSERT_TRUE(a.defined() && b.defined()) << p.key();
    EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-5))
        << p.key() << " max |diff| " << (a - b).abs().max().item<double>();
  }
}

}  // namespace
}  // namespace flywheel
