// Writes a flywheel policy as a Hugging Face model directory, the inverse of hf_config.h +
// hf_weights.h:
//
//   out/config.json              the source directory's config.json (its architecture and keys,
//                                torch_dtype set to the written dtype), or for a model flywheel
//                                initialised itself a LlamaForCausalLM (Qwen3ForCausalLM with
//                                q/k norms) config of its options
//   out/model.safetensors        every parameter by its Hugging Face name, in `dtype`
//   out/generation_config.json   the source's, or one with the given stop tokens
//   out/tokenizer.json, …        copied byte for byte from the source directory when present
//                                (tokenizer.json, tokenizer_config.json, special_tokens_map.json,
//                                added_tokens.json, vocab.json, merges.txt, tokenizer.model,
//                                chat_template.jinja)
//
// Every file is written atomically; `out` must not exist or be empty, so an export never mixes
// with another model's files. Loading the export (LoadHfModelConfig + LoadHfModel) gives the
// same model bit for bit when `dtype` holds the weights exactly (float32, or the source's BF16
// for weights that came from BF16 and were not trained).
#ifndef FLYWHEEL_MODEL_HF_EXPORT_H_
#define FLYWHEEL_MODEL_HF_EXPORT_H_

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/model/transformer.h"

namespace flywheel {

struct HfExportOptions {
  // The Hugging Face directory the model was loaded from (model.path); empty for a model
  // flywheel initialised itself.
  std::filesystem::path source_dir;
  // The dtype of model.safetensors: the source's dtype (HfSourceDtype), float32 otherwise.
  torch::ScalarType dtype = torch::kFloat32;
  // generation_config.json's eos_token_id when there is no source directory; empty = omitted.
  std::vector<int64_t> eos_token_ids;
};

// The tokenizer files copied from the source directory, in the order tried.
extern const char* const kHfTokenizerFiles[8];

absl::Status ExportHfModelDirectory(const TransformerImpl& model, const HfExportOptions& options,
                                    const std::filesystem::path& out);

// What `dir`'s weights are stored in: the safetensors' dtype when all tensors share one, else
// config.json's torch_dtype, else float32.
absl::StatusOr<torch::ScalarType> HfSourceDtype(const std::filesystem::path& dir);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_HF_EXPORT_H_
