#include "flywheel/model/rope_scaling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "flywheel/model/test_util.h"
#include "flywheel/model/transformer.h"

namespace flywheel {
namespace {

TEST(RopeScalingTest, WithoutScalingTheFrequenciesAreThetaPowers) {
  ModelOptions o = testing::TinyModelOptions();  // head_dim 8
  o.rope_theta = 500000;
  const auto inv_freq = RopeInverseFrequencies(o);
  ASSERT_EQ(inv_freq.numel(), 4);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(inv_freq[i].item<float>(), std::pow(500000.0, -2.0 * i / 8), 1e-7) << i;
  }
  // The unscaled path is the one the model always had: same bits as MakeRotary(head_dim, theta).
  const auto positions = torch::arange(20).unsqueeze(0);
  EXPECT_TRUE(MakeRotary(positions, o).cos.equal(MakeRotary(positions, 8, 500000).cos));
}

// Llama 3.1's rule, evaluated in double from its definition: three bands by wavelength.
TEST(RopeScalingTest, Llama3KeepsHighFrequenciesDividesLowOnesAndInterpolatesBetween) {
  const ModelOptions o = testing::TinyQwen3StyleOptions();  // head_dim 12, original 32, 1..4, x8
  const auto got = RopeInverseFrequencies(o);
  ASSERT_EQ(got.numel(), 6);
  const auto& s = o.rope_scaling;
  const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;    // 32
  const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;  // 8
  int bands[3] = {0, 0, 0};
  for (int64_t i = 0; i < 6; ++i) {
    const double base = std::pow(o.rope_theta, -2.0 * i / 12);
    const double wavelen = 2 * std::numbers::pi / base;
    double want;
    if (wavelen < high_wavelen) {
      want = base;
      ++bands[0];
    } else if (wavelen > low_wavelen) {
      want = base / s.factor;
      ++bands[2];
    } else {
      const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      want = (1 - smooth) * base / s.factor + smooth * base;
      ++bands[1];
    }
    EXPECT_NEAR(got[i].item<float>(), want, 1e-6 * want + 1e-9) << "frequency " << i;
  }
  EXPECT_EQ(bands[0], 1);  // the test covers every band
  EXPECT_EQ(bands[1], 1);
  EXPECT_EQ(bands[2], 4);
}

TEST(RopeScalingTest, UnknownTypesAndBadFactorsAreRefusedByValidate) {
  ModelOptions o = testing::TinyModelOptions();
  o.rope_scaling.type = "yarn";
  EXPECT_NE(o.Validate().message().find("model.rope_scaling.type = \"yarn\""), std::string::npos);
  o.rope_scaling.type = "llama3";
  o.rope_scaling.high_freq_factor = 0.5;
  EXPECT_FALSE(o.Validate().ok());
}

}  // namespace
}  // namespace flywheel
