// The weights of a Hugging Face model directory into flywheel's transformer, strictly by name
// (the module's names are Hugging Face's, transformer.h):
//
//   dir/model.safetensors                      one file, or
//   dir/model.safetensors.index.json           {"weight_map": {tensor name: shard file}}
//   dir/model-00001-of-00002.safetensors …     the shards it names (in dir, no sub-paths)
//
// Every file is memory-mapped (mapped_safetensors.h) and each tensor copied once into its
// parameter, BF16/F16/F32 converted to the parameter's dtype on the way; the whole directory is
// checked before anything is copied. Strict: a parameter missing from the files, a tensor the
// model does not have (lm_head.weight with tied embeddings included), a shape that differs, a
// tensor in two shards or where the index does not put it, is an error naming the tensor and the
// file. `*.rotary_emb.inv_freq` buffers that old exports carry are skipped: the model derives
// them from config.json. pytorch_model.bin checkpoints are not read (pickle): convert them.
#ifndef FLYWHEEL_MODEL_HF_WEIGHTS_H_
#define FLYWHEEL_MODEL_HF_WEIGHTS_H_

#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/model/model_options.h"
#include "flywheel/model/transformer.h"

namespace flywheel {

inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfWeightsIndexFile = "model.safetensors.index.json";

// The safetensors files of `dir` (full paths), from the index when there is one.
absl::StatusOr<std::vector<std::filesystem::path>> HfWeightFiles(const std::filesystem::path& dir);

struct HfWeightsSummary {
  std::vector<std::filesystem::path> files;
  int64_t tensors = 0;
  int64_t bytes = 0;  // of tensor data read
  // The dtype every tensor is stored in, or Undefined when they differ.
  torch::ScalarType dtype = torch::ScalarType::Undefined;
};

// Copies the directory's tensors into `model`'s parameters (see the top of the file).
absl::StatusOr<HfWeightsSummary> LoadHfWeights(const std::filesystem::path& dir,
                                               TransformerImpl& model);

// The dtype of the directory's tensors from the headers alone (no data read); Undefined when
// they differ.
absl::StatusOr<torch::ScalarType> HfWeightsDtype(const std::filesystem::path& dir);

// "bfloat16", "float16", "float32" (config.json's torch_dtype names) and back.
std::string HfDtypeName(torch::ScalarType dtype);
absl::StatusOr<torch::ScalarType> HfDtypeFromName(const std::string& name);

// A model of `options` (the shape of dir's config.json, ApplyHfModelConfig) holding dir's
// weights; `summary` (optional) receives what was read.
absl::StatusOr<Transformer> LoadHfModel(const std::filesystem::path& dir,
                                        const ModelOptions& options,
                                        HfWeightsSummary* summary = nullptr);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_HF_WEIGHTS_H_
