#include "flywheel/model/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "flywheel/model/attention_layout.h"
#include "flywheel/model/test_util.h"
#include "flywheel/model/transformer.h"
#include "flywheel/model/weight_snapshot.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

ModelOptions TinyPlaced() { return testing::TinyModelOptions(); }

TEST(PlacementTest, DeviceAndDtypeNamesAreChecked) {
  for (const char* ok : {"cpu", "cuda", "cuda:0", "cuda:12"}) {
    ModelOptions o = TinyPlaced();
    o.device = ok;
    EXPECT_TRUE(o.Validate().ok()) << ok;
  }
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "CUDA", "cuda:1:2", "mps"}) {
    ModelOptions o = TinyPlaced();
    o.device = bad;
    EXPECT_THAT(o.Validate().message(), HasSubstr("\"cpu\", \"cuda\" or \"cuda:N\"")) << bad;
  }
  ModelOptions o = TinyPlaced();
  o.dtype = "float16";
  EXPECT_THAT(o.Validate().message(), HasSubstr("model.dtype = \"float16\""));
  o.dtype = "bfloat16";
  EXPECT_TRUE(o.Validate().ok());
  EXPECT_EQ(ModelDtype(o), torch::kBFloat16);
  EXPECT_EQ(ModelDtype(TinyPlaced()), torch::kFloat32);
}

TEST(PlacementTest, CudaIsAClearErrorWithoutAGpuAndTheDeviceWithOne) {
  EXPECT_EQ(*ModelDevice(TinyPlaced()), torch::Device(torch::kCPU));
  ModelOptions o = TinyPlaced();
  o.device = "cuda:0";
  absl::StatusOr<torch::Device> device = ModelDevice(o);
  if (torch::cuda::is_available()) {
    ASSERT_TRUE(device.ok()) << device.status();
    EXPECT_EQ(*device, torch::Device(torch::kCUDA, 0));
    o.device = "cuda:4096";
    EXPECT_THAT(ModelDevice(o).status().message(), HasSubstr("GPU(s), cuda:0 to cuda:"));
  } else {
    EXPECT_TRUE(absl::IsFailedPrecondition(device.status())) << device.status();
    EXPECT_THAT(device.status().message(), HasSubstr("scripts/gpu-build"));
  }
}

TEST(PlacementTest, AutocastScopeLowersMatmulsAndRestoresTheStateBefore) {
  const torch::Tensor a = torch::randn({4, 8});
  const torch::Tensor b = torch::randn({8, 3});
  {
    AutocastScope outer(torch::kCPU, torch::kBFloat16);
    EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kBFloat16);
    {
      AutocastScope same(torch::kCPU, torch::kFloat32);  // float32: changes nothing
      EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kBFloat16);
    }
    EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kBFloat16);
  }
  EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kFloat32);
}

TEST(PlacementTest, BfloatSixteenForwardKeepsFloat32MasterWeightsAndGradients) {
  torch::manual_seed(1);
  auto model = MakeTransformer(TinyPlaced());
  ASSERT_TRUE(model.ok()) << model.status();
  const torch::Tensor tokens = torch::randint(0, 40, {2, 12});
  // Two rows of packed documents: the learner's document-attention path.
  const AttentionLayout layout = *MakePackedLayout({{5, 7}, {12}}, 12);
  const torch::Tensor exact = (*model)->forward(tokens, layout).detach();
  torch::Tensor lowered;
  {
    AutocastScope autocast(torch::kCPU, torch::kBFloat16);
    lowered = (*model)->forward(tokens, layout);
  }
  EXPECT_EQ(lowered.scalar_type(), torch::kBFloat16);
  const double error = (lowered.to(torch::kFloat32) - exact).abs().max().item<double>();
  // Computed in bfloat16 (8 bits of mantissa): near the float32 logits, not equal to them.
  EXPECT_GT(error, 0.0);
  EXPECT_LT(error, 0.05 * exact.abs().max().item<double>() + 0.02);
  torch::log_softmax(lowered.to(torch::kFloat32), -1).mean().backward();
  for (const auto& p : (*model)->parameters()) {
    EXPECT_EQ(p.scalar_type(), torch::kFloat32);
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().scalar_type(), torch::kFloat32);
    EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
  }
}

TEST(PlacementTest, ABfloatSixteenSnapshotHoldsRoundedCopiesAndDecodesWithTorchOps) {
  ModelOptions o = TinyPlaced();
  o.dtype = "bfloat16";
  auto model = MakeTransformer(o);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::shared_ptr<const WeightSnapshot>> snapshot = MakeSnapshot(*model, 3);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ((*snapshot)->cpu_weights, nullptr);  // the CPU decoder takes float32 only
  const auto master = (*model)->named_parameters();
  for (const auto& item : (*snapshot)->model->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), torch::kBFloat16) << item.key();
    EXPECT_TRUE(torch::equal(item.value(), master[item.key()].to(torch::kBFloat16))) << item.key();
    EXPECT_EQ(master[item.key()].scalar_type(), torch::kFloat32) << item.key();
  }
  const torch::Tensor tokens = torch::randint(0, 40, {1, 10});
  const AttentionLayout layout = *MakePackedLayout({{10}}, 10);
  torch::NoGradGuard no_grad;
  const torch::Tensor exact = (*model)->forward(tokens, layout);
  const torch::Tensor decoded = (*snapshot)->model->forward(tokens, layout);
  EXPECT_EQ(decoded.scalar_type(), torch::kBFloat16);
  EXPECT_LT((decoded.to(torch::kFloat32) - exact).abs().max().item<double>(),
            0.05 * exact.abs().max().item<double>() + 0.02);
}

}  // namespace
}  // namespace flywheel
