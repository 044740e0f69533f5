// The inverse frequencies of the rotary embedding (Su et al. 2021), with the frequency scaling
// of [model.rope_scaling]:
//
//   default:  inv_freq[i] = theta^(-2i / head_dim),  i < head_dim / 2
//   llama3:   (Llama 3.1; transformers' _compute_llama3_parameters) with wavelength
//             w = 2π / inv_freq, L = original_max_position_embeddings:
//               w > L / low_freq_factor             inv_freq / factor          (low frequencies)
//               w < L / high_freq_factor            inv_freq                   (high frequencies)
//               otherwise, s = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor):
//                                                   (1 - s) · inv_freq / factor + s · inv_freq
//
// Llama 3's attention factor is 1, so cos/sin are not rescaled. Computed in float32 with torch
// ops, as transformers does, so the angles agree with a Hugging Face model to the last bit of
// the formula's float32 evaluation. Both the LibTorch model and the CPU decoder's RoPE table
// take their frequencies from here.
#ifndef FLYWHEEL_MODEL_ROPE_SCALING_H_
#define FLYWHEEL_MODEL_ROPE_SCALING_H_

#include <torch/torch.h>

#include "flywheel/model/model_options.h"

namespace flywheel {

// [HeadDim() / 2] float32 on `device`.
torch::Tensor RopeInverseFrequencies(const ModelOptions& options,
                                     torch::Device device = torch::kCPU);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_ROPE_SCALING_H_
