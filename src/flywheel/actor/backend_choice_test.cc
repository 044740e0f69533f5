#include "flywheel/actor/backend_choice.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/model/test_util.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const WeightSnapshot> Snapshot(torch::Dtype dtype) {
  auto snapshot = std::make_shared<WeightSnapshot>();
  snapshot->version = 1;
  snapshot->model = *MakeTransformer(testing::TinyModelOptions());
  snapshot->model->to(dtype);
  return snapshot;
}

TEST(BackendChoiceTest, TimesBothBackendsAndKeepsTheFaster) {
  // Prompts of different lengths, one longer than the model's context: it keeps its last tokens.
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3}, {4}, std::vector<int64_t>(200, 5)};
  auto choice = MeasureBackends({}, Snapshot(torch::kFloat32), prompts, {.steps = 2, .rounds = 2});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_GT(choice->cpu_tokens_per_s, 0);
  EXPECT_GT(choice->torch_tokens_per_s, 0);
  EXPECT_EQ(choice->sequences, 3);
  EXPECT_FALSE(choice->cpu_target.empty());
  EXPECT_EQ(choice->chosen, choice->cpu_tokens_per_s >= choice->torch_tokens_per_s
                                ? DecodeBackend::kCpu
                                : DecodeBackend::kTorch);
  EXPECT_THAT(choice->DebugString(), HasSubstr("tokens/s"));
}

TEST(BackendChoiceTest, WeightsTheCpuDecoderCannotRunChooseTorchWithoutMeasuring) {
  auto choice = MeasureBackends({}, Snapshot(torch::kFloat64), {{1, 2}});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->chosen, DecodeBackend::kTorch);
  EXPECT_EQ(choice->cpu_tokens_per_s, 0);
}

TEST(BackendChoiceTest, NeedsAPrompt) {
  EXPECT_THAT(MeasureBackends({}, Snapshot(torch::kFloat32), {}).status().message(),
              HasSubstr("at least one prompt"));
}

}  // namespace
}  // namespace flywheel
