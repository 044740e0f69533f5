#include "flywheel/learner/packer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <random>

#include "flywheel/core/metrics.h"
#include "flywheel/learner/losses.h"
#include "flywheel/learner/token_logprobs.h"

namespace flywheel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// `prompt` prompt tokens then `generated` policy tokens; token ids from a seed.
Trajectory Make(std::string id, int64_t prompt, int64_t generated, int seed = 0,
                std::string execution = "") {
  Trajectory t;
  t.id = std::move(id);
  t.execution_id = std::move(execution);
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < prompt; ++i) t.AppendPrompt(static_cast<int32_t>(rng() % 11));
  for (int64_t i = 0; i < generated; ++i) {
    t.AppendGenerated(static_cast<int32_t>(rng() % 11), -0.1f * static_cast<float>(i + 1), 3 + i);
  }
  return t;
}

std::vector<std::vector<float>> Advantages(const std::vector<Trajectory>& batch) {
  std::vector<std::vector<float>> adv;
  for (const Trajectory& t : batch) {
    std::vector<float> a(t.tokens.size());
    for (size_t j = 0; j < a.size(); ++j) a[j] = t.trainable[j] ? 0.5f + j : 0.0f;
    adv.push_back(a);
  }
  return adv;
}

PackerOptions Options(std::vector<int64_t> buckets, int64_t budget) {
  PackerOptions o;
  o.buckets = std::move(buckets);
  o.token_budget = budget;
  return o;
}

TEST(PackerTest, FirstFitDecreasingPlacement) {
  const std::vector<int64_t> sizes = {5, 7, 3, 2, 4, 6};
  // Sorted: 7 6 5 4 3 2. 7→bin0, 6→bin1, 5→bin2, 4→bin1 (full), 3→bin0 (full), 2→bin2.
  EXPECT_THAT(FirstFitDecreasing(sizes, 10),
              ElementsAre(ElementsAre(1, 2), ElementsAre(5, 4), ElementsAre(0, 3)));
  const std::vector<int64_t> equal = {4, 4, 4};  // ties keep input order
  EXPECT_THAT(FirstFitDecreasing(equal, 8), ElementsAre(ElementsAre(0, 1), ElementsAre(2)));
}

TEST(PackerTest, AlignsTargetsWithTheTokenTheLogitsPredict) {
  // tokens   p0 p1 a2 a3 | q0 b1      (a, b generated)
  Trajectory x = Make("x", 2, 2, 1);
  Trajectory y = Make("y", 1, 1, 2);
  std::vector<Trajectory> batch = {x, y};
  const auto adv = Advantages(batch);
  Packer packer(Options({8}, 8));
  auto step = packer.Pack(batch, adv);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->micro_batches.size(), 1u);
  const PackedMicroBatch& mb = step->micro_batches[0];
  EXPECT_EQ(mb.rows, 1);
  EXPECT_EQ(mb.length, 8);
  EXPECT_THAT(mb.doc_lengths, ElementsAre(ElementsAre(4, 2)));
  EXPECT_THAT(mb.doc_trajectories, ElementsAre(ElementsAre(0, 1)));
  auto at = [&](const torch::Tensor& t, int64_t i) { return t[0][i]; };
  for (int j = 0; j < 4; ++j) EXPECT_EQ(at(mb.tokens, j).item<int64_t>(), x.tokens[j]);
  for (int j = 0; j < 2; ++j) EXPECT_EQ(at(mb.tokens, 4 + j).item<int64_t>(), y.tokens[j]);
  // Position i predicts document token i + 1.
  for (int j = 0; j < 3; ++j) EXPECT_EQ(at(mb.targets, j).item<int64_t>(), x.tokens[j + 1]);
  EXPECT_EQ(at(mb.targets, 4).item<int64_t>(), y.tokens[1]);
  // Trainable where the *predicted* token was generated: positions 1, 2 (→ a2, a3) and 4 (→ b1).
  std::vector<int> trainable;
  for (int i = 0; i < 8; ++i) trainable.push_back(at(mb.trainable, i).item<bool>());
  EXPECT_THAT(trainable, ElementsAre(0, 1, 1, 0, 1, 0, 0, 0));
  EXPECT_FLOAT_EQ(at(mb.behaviour_logprobs, 1).item<float>(), x.logprobs[2]);
  EXPECT_FLOAT_EQ(at(mb.behaviour_logprobs, 2).item<float>(), x.logprobs[3]);
  EXPECT_FLOAT_EQ(at(mb.behaviour_logprobs, 4).item<float>(), y.logprobs[1]);
  EXPECT_EQ(at(mb.versions, 2).item<int64_t>(), x.versions[3]);
  EXPECT_FLOAT_EQ(at(mb.advantages, 2).item<float>(), adv[0][3]);
  EXPECT_EQ(at(mb.behaviour_logprobs, 0).item<float>(), 0.0f);  // never NaN in the tensors
  // Ids cover each document; padding is -1.
  std::vector<int64_t> seq;
  for (int i = 0; i < 8; ++i) seq.push_back(at(mb.sequence_ids, i).item<int64_t>());
  EXPECT_THAT(seq, ElementsAre(0, 0, 0, 0, 1, 1, -1, -1));
  EXPECT_EQ(step->trainable_tokens, 3);
  EXPECT_EQ(step->real_tokens, 6);
  EXPECT_EQ(step->capacity_tokens, 8);
  EXPECT_DOUBLE_EQ(step->padding_waste(), 0.25);
}

TEST(PackerTest, ChoosesTheBucketWithLeastPadding) {
  // buckets {10, 16}, budget 20. L = 10: 2 rows per micro-batch, 4 bins → 40 positions.
  // L = 16: 1 row, FFD pairs 9+7 twice → 2 micro-batches of 16 = 32 positions. 16 wins.
  std::vector<Trajectory> batch = {Make("a", 4, 5), Make("b", 4, 5), Make("c", 3, 4),
                                   Make("d", 3, 4)};
  Packer packer(Options({10, 16}, 20));
  auto step = packer.Pack(batch, Advantages(batch));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->bucket, 16);
  EXPECT_EQ(step->rows_per_micro_batch, 1);
  EXPECT_EQ(step->micro_batches.size(), 2u);
  EXPECT_EQ(step->capacity_tokens, 32);
  // Four of length 5: L = 10 packs them into one micro-batch of 2 full rows (20 positions);
  // L = 16 needs 5+5+5 | 5 → 2 micro-batches (32 positions). 10 wins.
  std::vector<Trajectory> short_batch = {Make("e", 2, 3), Make("f", 2, 3), Make("g", 2, 3),
                                         Make("h", 2, 3)};
  step = packer.Pack(short_batch, Advantages(short_batch));
  ASSERT_TRUE(step.ok());
  EXPECT_EQ(step->bucket, 10);
  EXPECT_THAT(step->micro_batches[0].doc_lengths,
              ElementsAre(ElementsAre(5, 5), ElementsAre(5, 5)));
  EXPECT_EQ(step->padding_waste(), 0.0);
  EXPECT_EQ(packer.distinct_shapes(), 2);
}

TEST(PackerTest, TooLongTrajectoryIsAnErrorNamingItOrDroppedAndCounted) {
  std::vector<Trajectory> batch = {Make("fits", 2, 3), Make("huge-17", 10, 10)};
  Packer packer(Options({8, 16}, 16));
  auto step = packer.Pack(batch, Advantages(batch));
  ASSERT_FALSE(step.ok());
  EXPECT_THAT(step.status().message(), HasSubstr("'huge-17'"));
  EXPECT_THAT(step.status().message(), HasSubstr("20 tokens"));
  EXPECT_THAT(step.status().message(), HasSubstr("learner.too_long"));

  Counter* dropped = MetricsRegistry::Global().GetCounter("learner.dropped{reason=too_long}");
  const int64_t before = dropped->value();
  PackerOptions drop = Options({8, 16}, 16);
  drop.too_long = TooLongPolicy::kDrop;
  Packer dropping(drop);
  step = dropping.Pack(batch, Advantages(batch));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_THAT(step->dropped_too_long, ElementsAre("huge-17"));
  EXPECT_EQ(dropped->value(), before + 1);
  EXPECT_EQ(step->real_tokens, 5);
}

TEST(PackerTest, RejectsBadInputNamingTheTrajectory) {
  std::vector<Trajectory> batch = {Make("t-3", 2, 2)};
  Packer packer(Options({8}, 8));
  std::vector<std::vector<float>> wrong = {std::vector<float>(3)};
  EXPECT_THAT(packer.Pack(batch, wrong).status().message(), HasSubstr("'t-3' has 4 tokens"));
  batch[0].versions.pop_back();
  EXPECT_THAT(packer.Pack(batch, Advantages(batch)).status().message(), HasSubstr("t-3"));
  Packer unsorted(Options({16, 8}, 16));
  EXPECT_THAT(unsorted.Pack({}, {}).status().message(), HasSubstr("ascending; got [16, 8]"));
}

TEST(PackerTest, DistinctShapesNeverExceedBucketsOverManyMixedBatches) {
  const std::vector<int64_t> buckets = {64, 128, 256};
  Packer packer(Options(buckets, 1024));
  std::mt19937 rng(11);
  std::lognormal_distribution<double> length(3.5, 0.8);
  for (int s = 0; s < 50; ++s) {
    std::vector<Trajectory> batch;
    for (int i = 0; i < 24; ++i) {
      const int64_t n = std::clamp<int64_t>(static_cast<int64_t>(length(rng)), 2, 256);
      batch.push_back(Make(StrCat("s", s, "-", i), 1 + n / 4, n - 1 - n / 4, i));
    }
    auto step = packer.Pack(batch, Advantages(batch));
    ASSERT_TRUE(step.ok()) << step.status();
    int64_t docs = 0;
    for (const auto& mb : step->micro_batches) {
      EXPECT_EQ(mb.rows * mb.length, mb.rows * step->bucket);
      for (const auto& row : mb.doc_lengths) {
        int64_t used = 0;
        for (int64_t n : row) used += n;
        EXPECT_LE(used, mb.length);
        docs += static_cast<int64_t>(row.size());
      }
    }
    EXPECT_EQ(docs, 24);
  }
  EXPECT_LE(packer.distinct_shapes(), static_cast<int64_t>(buckets.size()));
}

TEST(PackerTest, LossWeightsEqualAggregationOverTheWholeStep) {
  std::vector<Trajectory> batch = {Make("a", 2, 5, 1, "e1"), Make("b", 3, 2, 2, "e1"),
                                   Make("c", 1, 6, 3, "e2"), Make("d", 2, 1, 4, "")};
  for (LossAggregation agg : {LossAggregation::kTokenMean, LossAggregation::kSequenceMean,
                              LossAggregation::kExecutionMean}) {
    PackerOptions o = Options({8}, 16);  // 2 rows per micro-batch: several micro-batches
    o.aggregation = agg;
    Packer packer(o);
    auto step = packer.Pack(batch, Advantages(batch));
    ASSERT_TRUE(step.ok());
    ASSERT_GT(step->micro_batches.size(), 1u);
    std::vector<torch::Tensor> trainable, seq, exec, weights;
    for (const auto& mb : step->micro_batches) {
      trainable.push_back(mb.trainable.reshape({-1}));
      seq.push_back(mb.sequence_ids.reshape({-1}));
      exec.push_back(mb.execution_ids.reshape({-1}));
      weights.push_back(mb.loss_weights.reshape({-1}));
    }
    auto expected =
        AggregationWeights(agg, torch::cat(trainable), torch::cat(seq), torch::cat(exec));
    ASSERT_TRUE(expected.ok());
    EXPECT_TRUE(torch::allclose(torch::cat(weights), *expected, 1e-6, 1e-7));
    EXPECT_NEAR(torch::cat(weights).sum().item<double>(), 1.0, 1e-6);
  }
}

// Deferred normalisation (streaming steps): the weights are u_t and normaliser is D, with
// u_t / D the normalised weights, for every aggregation.
TEST(PackerTest, UnnormalisedWeightsDividedByTheNormaliserAreTheNormalisedOnes) {
  std::vector<Trajectory> batch = {Make("a", 2, 5, 1, "e1"), Make("b", 3, 2, 2, "e1"),
                                   Make("c", 1, 6, 3, "e2"), Make("d", 2, 1, 4, "")};
  const std::vector<double> expected_d = {5 + 2 + 6 + 1, 4, 3};  // tokens, sequences, executions
  int i = 0;
  for (LossAggregation agg : {LossAggregation::kTokenMean, LossAggregation::kSequenceMean,
                              LossAggregation::kExecutionMean}) {
    PackerOptions o = Options({8}, 16);
    o.aggregation = agg;
    auto normalised = Packer(o).Pack(batch, Advantages(batch));
    o.normalise_weights = false;
    auto deferred = Packer(o).Pack(batch, Advantages(batch));
    ASSERT_TRUE(normalised.ok() && deferred.ok());
    EXPECT_EQ(deferred->normaliser, expected_d[i++]);
    EXPECT_EQ(normalised->normaliser, deferred->normaliser);
    ASSERT_EQ(normalised->micro_batches.size(), deferred->micro_batches.size());
    for (size_t m = 0; m < deferred->micro_batches.size(); ++m) {
      EXPECT_TRUE(torch::allclose(deferred->micro_batches[m].loss_weights / deferred->normaliser,
                                  normalised->micro_batches[m].loss_weights, 1e-6, 1e-7));
    }
  }
}

TEST(PackerTest, CarryOverHoldsPartFilledRowsForOneStepOnly) {
  PackerOptions o = Options({8}, 16);  // 2 rows of 8 per micro-batch
  o.carry_over = true;
  Packer packer(o);
  // Three full-row trajectories: 2 fill a micro-batch, the third would half-fill a second one.
  std::vector<Trajectory> batch = {Make("a", 2, 6), Make("b", 2, 6), Make("c", 2, 6)};
  auto step = packer.Pack(batch, Advantages(batch));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_THAT(step->held_back, ElementsAre(2));
  EXPECT_EQ(step->micro_batches.size(), 1u);
  EXPECT_EQ(step->padding_waste(), 0.0);
  EXPECT_EQ(step->trainable_tokens, 12);  // weights cover only what was packed
  EXPECT_NEAR(step->micro_batches[0].loss_weights.sum().item<double>(), 1.0, 1e-6);

  // Next step: the held trajectory goes first and is packed whatever happens to the tail.
  std::vector<Trajectory> next = {batch[2], Make("d", 2, 6), Make("e", 2, 6)};
  step = packer.Pack(next, Advantages(next), /*carried=*/1);
  ASSERT_TRUE(step.ok());
  EXPECT_THAT(step->held_back, ElementsAre(2));  // "e", a new one, waits instead
  EXPECT_THAT(step->micro_batches[0].doc_trajectories, ElementsAre(ElementsAre(0), ElementsAre(1)));

  // A tail made only of carried trajectories is never held back again.
  step = packer.Pack(batch, Advantages(batch), /*carried=*/3);
  ASSERT_TRUE(step.ok());
  EXPECT_TRUE(step->held_back.empty());
  EXPECT_EQ(step->micro_batches.size(), 2u);
  // Without carry_over nothing is held.
  Packer plain(Options({8}, 16));
  step = plain.Pack(batch, Advantages(batch));
  ASSERT_TRUE(step.ok());
  EXPECT_TRUE(step->held_back.empty());
  EXPECT_DOUBLE_EQ(step->padding_waste(), 0.25);
}

TEST(PackerTest, PriorityItemsArePlacedFirst) {
  const std::vector<int64_t> sizes = {2, 7, 5};
  const std::vector<uint8_t> priority = {1, 0, 0};
  EXPECT_THAT(FirstFitDecreasing(sizes, 8, priority),
              ElementsAre(ElementsAre(0, 2), ElementsAre(1)));
}

// A bigram model (logits at i depend only on token i) has no attention across documents, so a
// packed batch must give exactly the loss and gradients of the trajectories taken one by one:
// this checks the target/mask alignment end to end.
TEST(PackerTest, PackedLossAndGradientsEqualOneByOne) {
  torch::manual_seed(5);
  std::vector<Trajectory> batch;
  for (int i = 0; i < 7; ++i) {
    batch.push_back(Make(StrCat("t", i), 1 + i % 3, 2 + (5 * i) % 7, i));
  }
  const auto adv = Advantages(batch);
  torch::nn::Embedding packed_model(11, 11), single_model(11, 11);
  {
    torch::NoGradGuard no_grad;
    single_model->weight.copy_(packed_model->weight);
  }
  LossOptions options;
  options.kind = PolicyLossKind::kTruncatedIs;
  options.is_cap = 2.0;

  Packer packer(Options({16, 32}, 32));
  auto step = packer.Pack(batch, adv);
  ASSERT_TRUE(step.ok()) << step.status();
  double packed_loss = 0;
  for (const PackedMicroBatch& mb : step->micro_batches) {  // gradient accumulation
    PolicyLossInputs in;
    in.logprobs = TokenLogprobs(packed_model->forward(mb.tokens), mb.targets);
    in.behaviour_logprobs = mb.behaviour_logprobs;
    in.advantages = mb.advantages;
    in.trainable = mb.trainable;
    in.loss_weights = mb.loss_weights;
    auto out = PolicyLoss(options, in);
    ASSERT_TRUE(out.ok()) << out.status();
    out->loss.backward();
    packed_loss += out->loss.item<double>();
  }

  // One by one, with the formula written out: token j is predicted from token j − 1.
  torch::Tensor direct = torch::zeros({});
  const double n = static_cast<double>(step->trainable_tokens);
  for (size_t i = 0; i < batch.size(); ++i) {
    const Trajectory& t = batch[i];
    for (int64_t j = 1; j < t.size(); ++j) {
      if (!t.trainable[j]) continue;
      const torch::Tensor lp =
          torch::log_softmax(single_model->weight[t.tokens[j - 1]], 0)[t.tokens[j]];
      const double w = std::min(std::exp(lp.item<double>() - t.logprobs[j]), 2.0);
      direct = direct - w * adv[i][j] * lp / n;
    }
  }
  direct.backward();
  EXPECT_NEAR(packed_loss, direct.item<double>(), 1e-5);
  EXPECT_TRUE(
      torch::allclose(packed_model->weight.grad(), single_model->weight.grad(), 1e-5, 1e-5));
}

}  // namespace
}  // namespace flywheel
