#include "flywheel/model/rope_scaling.h"

#include <numbers>

namespace flywheel {

torch::Tensor RopeInverseFrequencies(const ModelOptions& o, torch::Device device) {
  const int64_t head_dim = o.HeadDim();
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  // The unscaled formula exactly as the model has always computed it (bit-identical angles for
  // configurations without scaling).
  const torch::Tensor inv_freq = torch::pow(
      o.rope_theta, -torch::arange(0, head_dim, 2, opts) / static_cast<double>(head_dim));
  const RopeScalingOptions& s = o.rope_scaling;
  if (!s.enabled()) return inv_freq;
  TORCH_CHECK_VALUE(s.type == "llama3", "rope scaling type ", s.type, " is not supported");
  const double context = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = context / s.low_freq_factor;
  const double high_freq_wavelen = context / s.high_freq_factor;
  const torch::Tensor wavelen = 2 * std::numbers::pi / inv_freq;
  const torch::Tensor low_scaled =
      torch::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  const torch::Tensor smooth =
      (context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const torch::Tensor smoothed = (1 - smooth) * low_scaled / s.factor + smooth * low_scaled;
  const torch::Tensor medium =
      (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return torch::where(medium, smoothed, low_scaled);
}

}  // namespace flywheel
