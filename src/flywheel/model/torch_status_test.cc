#include "flywheel/model/torch_status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace flywheel {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(TorchStatusTest, ShapeMismatchBecomesStatusWithContext) {
  const absl::Status s = TorchCall("learner step 41: forward", [] {
    torch::matmul(torch::ones({2, 3}), torch::ones({4, 5}));
  });
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("learner step 41: forward: "));
  EXPECT_THAT(s.message(), HasSubstr("cannot be multiplied"));
  EXPECT_THAT(s.message(), Not(HasSubstr("frame #")));  // no C++ backtrace in user messages
}

TEST(TorchStatusTest, ValueIsPassedThrough) {
  absl::StatusOr<int64_t> n = TorchCallOr("count", [] { return torch::ones({3, 4}).numel(); });
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 12);
  absl::StatusOr<torch::Tensor> t =
      TorchCallOr("index", [] { return torch::ones({3}).index({torch::tensor({7})}); });
  EXPECT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("index: "));
}

TEST(TorchStatusTest, OkWhenNothingThrows) {
  EXPECT_TRUE(TorchCall("noop", [] {}).ok());
}

}  // namespace
}  // namespace flywheel
