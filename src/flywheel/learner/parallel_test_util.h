// Test helpers for data-parallel and sharded learner tests: a tiny transformer policy, fixed
// batches of trajectories per step, ranks as threads over a HashStore, and weight comparison.
#ifndef FLYWHEEL_LEARNER_PARALLEL_TEST_UTIL_H_
#define FLYWHEEL_LEARNER_PARALLEL_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <latch>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/dist/communicator.h"
#include "flywheel/learner/learner_step.h"
#include "flywheel/learner/sharding.h"
#include "flywheel/model/attention_layout.h"
#include "flywheel/model/test_util.h"
#include "flywheel/model/transformer.h"

namespace flywheel::testing {

inline constexpr int64_t kParallelVocab = 64;
inline constexpr int64_t kParallelRunSteps = 100;

inline ModelOptions ParallelModelOptions(int64_t seed = 7) {
  ModelOptions o = TinyModelOptions(seed);
  o.vocab_size = kParallelVocab;
  return o;
}

// Small buckets and budget so that a step has several micro-batches of 2 rows. A small lr keeps
// AdamW's g / sqrt(v) from amplifying float summation-order differences of near-zero gradients
// (the equality bound stays 1e-5 while the weights still move ~50x that in 5 steps).
inline LearnerOptions ParallelLearnerOptions(PolicyLossKind loss) {
  LearnerOptions o;
  o.loss = loss;
  o.advantage = AdvantageKind::kGrpo;
  o.buckets = {16, 32};
  o.token_budget = 32;
  o.lr = 1e-4;
  o.grad_clip = 1.0;
  o.max_staleness = -1;
  o.grad_bucket_mb = 0.01;  // ~10 KB: several buckets even on the tiny model
  return o;
}

// Member `i` of group `g` of step `step`: a 2-4 token prompt, 3-11 generated tokens with
// behaviour log-probs near -4.2 at version `step`, a reward in [0, 1).
inline Trajectory RandomTrajectory(std::mt19937& rng, int64_t step, int g, int i) {
  std::uniform_int_distribution<int32_t> token(1, kParallelVocab - 1);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  Trajectory t;
  t.id = StrCat("s", step, "-g", g, "-", i);
  t.group_id = StrCat("s", step, "-g", g);
  const int prompt = 2 + static_cast<int>(rng() % 3);
  const int generated = 3 + static_cast<int>(rng() % 9);
  for (int j = 0; j < prompt; ++j) t.AppendPrompt(token(rng));
  for (int j = 0; j < generated; ++j) {
    t.AppendGenerated(token(rng), -4.2f + unit(rng) - 0.5f, step);
  }
  t.final_reward = unit(rng);
  return t;
}

// The batch of step `step`: 3 groups of 4 (plus one extra group every other step, so that the
// number of micro-batches varies and is often not a multiple of the world size), random tokens,
// lengths, rewards and behaviour log-probs, generated at version `step`.
inline std::vector<Trajectory> BatchForStep(int64_t step) {
  std::mt19937 rng(static_cast<uint32_t>(1000 + step));
  std::vector<Trajectory> batch;
  const int groups = 3 + static_cast<int>(step % 2);
  for (int g = 0; g < groups; ++g) {
    for (int i = 0; i < 4; ++i) batch.push_back(RandomTrajectory(rng, step, g, i));
  }
  return batch;
}

// A policy: the transformer and the packed forward the learner calls.
struct TinyPolicy {
  Transformer model{nullptr};

  explicit TinyPolicy(int64_t seed = 7) {
    auto m = MakeTransformer(ParallelModelOptions(seed));
    EXPECT_TRUE(m.ok()) << m.status();
    model = *m;
  }
  PolicyForward Forward() const {
    Transformer m = model;
    return [m](const PackedMicroBatch& mb) -> absl::StatusOr<torch::Tensor> {
      ASSIGN_OR_RETURN(AttentionLayout layout, MakePackedLayout(mb.doc_lengths, mb.length));
      return m->forward(mb.tokens, layout);
    };
  }
  std::vector<torch::Tensor> Parameters() const { return model->parameters(); }
  std::vector<ShardUnit> Units() const {
    std::vector<std::string> names;
    for (const auto& item : model->named_parameters()) names.push_back(item.key());
    return TransformerUnits(names);
  }
  std::vector<torch::Tensor> Weights() const {
    std::vector<torch::Tensor> out;
    for (const torch::Tensor& p : model->parameters()) out.push_back(p.detach().clone());
    return out;
  }
};

inline double MaxAbsDiff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, (a[i] - b[i]).abs().max().item<double>());
  }
  return diff;
}

inline bool BitEqual(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

// Runs fn(rank, communicator) on `size` threads forming one group over a fresh HashStore.
// No rank's group is torn down before every rank is done: a rank whose fn returns at once (a
// refusal) would otherwise close its connections while the others are still joining the group.
inline void RunRanks(int size, const std::function<void(int, dist::Communicator&)>& fn) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::latch done(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      torch::set_num_threads(1);
      dist::CommunicatorOptions options;
      options.timeout = std::chrono::milliseconds(60000);
      options.name = StrCat("test group of ", size);
      auto comm = dist::Communicator::Create(store, rank, size, options);
      if (!comm.ok()) {
        done.count_down();
        FAIL() << comm.status();
      }
      fn(rank, **comm);
      done.arrive_and_wait();
    });
  }
  for (auto& t : threads) t.join();
}

// Single-process reference: `steps` steps from a fresh policy; returns the final weights.
inline std::vector<torch::Tensor> ReferenceWeights(const LearnerOptions& options, int64_t steps) {
  torch::set_num_threads(1);
  TinyPolicy policy;
  LearnerStep learner(options, kParallelRunSteps, policy.Parameters(), policy.Forward());
  for (int64_t s = 0; s < steps; ++s) {
    auto result = learner.Step(BatchForStep(s));
    EXPECT_TRUE(result.ok()) << result.status();
  }
  return policy.Weights();
}

}  // namespace flywheel::testing

#endif  // FLYWHEEL_LEARNER_PARALLEL_TEST_UTIL_H_
