#include "flywheel/scheduler/micro_step_wire.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>
#include <vector>

#include "flywheel/learner/parallel_test_util.h"
#include "flywheel/scheduler/micro_step_queue.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

// Real micro-steps: the queue's packing of a few random groups (ParallelLearnerOptions' small
// buckets, so several micro-steps of several documents per row).
std::vector<std::shared_ptr<const MicroStep>> MicroSteps() {
  const LearnerOptions options = testing::ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo);
  MicroStepQueue queue(MicroStepQueueOptions::FromLearnerOptions(options));
  EXPECT_TRUE(queue.BeginStep(3, /*version=*/2).ok());
  EXPECT_TRUE(queue.Join(0, 3).ok());
  std::mt19937 rng(5);
  std::vector<Trajectory> groups;
  for (int g = 0; g < 3; ++g) {
    for (int i = 0; i < 4; ++i) groups.push_back(testing::RandomTrajectory(rng, 2, g, i));
  }
  EXPECT_TRUE(queue.Add(std::move(groups)).ok());
  EXPECT_TRUE(queue.Close().ok());
  std::vector<std::shared_ptr<const MicroStep>> out;
  for (;;) {
    auto ms = queue.Claim(0, absl::Now() + absl::Seconds(5));
    EXPECT_TRUE(ms.ok()) << ms.status();
    if (!ms.ok() || *ms == nullptr) break;
    out.push_back(*ms);
    EXPECT_TRUE(queue.Done(0, (*ms)->id).ok());
  }
  return out;
}

v1::WireMicroStep Wire(const MicroStep& ms) {
  v1::WireMicroStep wire;
  EXPECT_TRUE(MicroStepToWire(ms, &wire).ok());
  return wire;
}

TEST(MicroStepWireTest, RoundTripIsBitExact) {
  const auto micro_steps = MicroSteps();
  ASSERT_GT(micro_steps.size(), 1u);
  for (const auto& ms : micro_steps) {
    // Through the serialised bytes, as gRPC sends it.
    v1::WireMicroStep parsed;
    ASSERT_TRUE(parsed.ParseFromString(Wire(*ms).SerializeAsString()));
    auto back = MicroStepFromWire(parsed);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->id, ms->id);
    EXPECT_EQ(back->step, 3);
    EXPECT_EQ(back->version, 2);
    const PackedMicroBatch& a = ms->batch;
    const PackedMicroBatch& b = back->batch;
    EXPECT_EQ(b.rows, a.rows);
    EXPECT_EQ(b.length, a.length);
    EXPECT_EQ(b.real_tokens, a.real_tokens);
    EXPECT_EQ(b.doc_lengths, a.doc_lengths);
    EXPECT_EQ(b.doc_trajectories, a.doc_trajectories);
    for (const auto& [x, y] : std::vector<std::pair<torch::Tensor, torch::Tensor>>{
             {a.tokens, b.tokens},
             {a.targets, b.targets},
             {a.trainable, b.trainable},
             {a.behaviour_logprobs, b.behaviour_logprobs},
             {a.versions, b.versions},
             {a.advantages, b.advantages},
             {a.loss_weights, b.loss_weights},
             {a.sequence_ids, b.sequence_ids},
             {a.execution_ids, b.execution_ids}}) {
      EXPECT_EQ(x.scalar_type(), y.scalar_type());
      EXPECT_TRUE(torch::equal(x, y));
    }
  }
}

TEST(MicroStepWireTest, TensorsOfEveryDtypeRoundTrip) {
  for (const torch::Tensor& t :
       {torch::randn({3, 4}), torch::randn({2}, torch::kFloat64),
        torch::arange(6, torch::kInt32).reshape({2, 3}), torch::arange(5, torch::kInt64),
        torch::tensor({true, false, true}), torch::empty({0, 3}),
        torch::randn({4, 3}).t()}) {  // a non-contiguous view
    v1::WireTensor wire;
    ASSERT_TRUE(TensorToWire(t, &wire).ok());
    auto back = TensorFromWire(wire, "t");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(torch::equal(*back, t));
  }
  v1::WireTensor wire;
  EXPECT_EQ(TensorToWire(torch::ones({2}, torch::kBFloat16), &wire).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TensorToWire(torch::Tensor(), &wire).code(), absl::StatusCode::kInvalidArgument);
}

// Each malformation is refused with a message naming the field, never a crash.
TEST(MicroStepWireTest, MalformedMessagesAreRefusedNamingTheField) {
  const auto micro_steps = MicroSteps();
  ASSERT_FALSE(micro_steps.empty());
  const v1::WireMicroStep good = Wire(*micro_steps[0]);
  struct Case {
    const char* what;
    std::function<void(v1::WireMicroStep&)> mutate;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"truncated bytes", [](auto& w) { w.mutable_advantages()->mutable_data()->pop_back(); },
       "advantages: "},
      {"extra bytes", [](auto& w) { w.mutable_tokens()->mutable_data()->append("x"); }, "tokens: "},
      {"unknown dtype", [](auto& w) { w.mutable_targets()->set_dtype("Q8"); },
       "targets is Q8, expected I64"},
      {"wrong dtype", [](auto& w) { w.mutable_loss_weights()->set_dtype("F64"); },
       "loss_weights is F64, expected F32"},
      {"missing tensor", [](auto& w) { w.clear_versions(); }, "versions is missing"},
      {"wrong shape", [](auto& w) { w.mutable_sequence_ids()->set_shape(1, 1); },
       "sequence_ids has shape"},
      {"bool byte 2", [](auto& w) { (*w.mutable_trainable()->mutable_data())[0] = 2; },
       "byte 0 of a BOOL tensor is 2"},
      {"no rows", [](auto& w) { w.set_rows(0); }, "must be positive"},
      {"document too long", [](auto& w) { w.mutable_doc_lengths(0)->set_values(0, 1000); },
       "do not fit a row"},
      {"row missing", [](auto& w) { w.mutable_doc_trajectories()->RemoveLast(); },
       "doc_trajectories"},
      {"real tokens", [](auto& w) { w.set_real_tokens(-1); }, "real_tokens -1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    v1::WireMicroStep bad = good;
    c.mutate(bad);
    auto decoded = MicroStepFromWire(bad);
    ASSERT_FALSE(decoded.ok());
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(decoded.status().message()), HasSubstr(c.expected));
    EXPECT_THAT(std::string(decoded.status().message()), HasSubstr("micro-step 0 of step 3"));
  }
  // Negative or overflowing shapes of a bare tensor.
  v1::WireTensor t;
  t.set_dtype("F32");
  t.add_shape(-1);
  EXPECT_THAT(std::string(TensorFromWire(t, "x").status().message()), HasSubstr("bad shape"));
  t.set_shape(0, int64_t{1} << 62);
  t.add_shape(int64_t{1} << 62);
  EXPECT_THAT(std::string(TensorFromWire(t, "x").status().message()), HasSubstr("bad shape"));
}

}  // namespace
}  // namespace flywheel
