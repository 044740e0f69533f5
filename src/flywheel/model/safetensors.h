// safetensors files (https://huggingface.co/docs/safetensors): the state dict format of Hugging
// Face checkpoints, so flywheel can save its policy and load real Llama/Qwen2 weights by name.
//
//   [u64 little-endian N][N bytes JSON header, space-padded to 8][raw little-endian tensor data]
//   header: {"__metadata__": {...}, "model.norm.weight": {"dtype": "F32", "shape": [128],
//            "data_offsets": [begin, end]}, ...}   offsets relative to the data section
//
// Supported dtypes: F32, BF16, F16. Reading checks every offset, shape and size against the file,
// so a corrupt or truncated file is an error naming the file and the tensor, never a crash.
// Writing is atomic (temp file, fsync, rename).
#ifndef FLYWHEEL_MODEL_SAFETENSORS_H_
#define FLYWHEEL_MODEL_SAFETENSORS_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flywheel {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Writes `tensors` converted to `dtype` (kFloat32, kBFloat16 or kFloat16); empty names and
// duplicate names are errors.
absl::Status WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                              torch::ScalarType dtype = torch::kFloat32,
                              const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  NamedTensors tensors;  // CPU tensors in the file's dtype, in data-offset order
  std::map<std::string, std::string> metadata;
};
absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);

// The module's parameters and buffers by their full names.
absl::Status SaveStateDict(const std::string& path, const torch::nn::Module& module,
                           torch::ScalarType dtype = torch::kFloat32);
// Copies every parameter/buffer of `module` from the file (converting dtype, keeping the
// module's device). A missing tensor, a shape mismatch or (when `strict`) a tensor the module
// does not have is an error naming it.
absl::Status LoadStateDict(const std::string& path, torch::nn::Module& module, bool strict = true);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_SAFETENSORS_H_
