#include "flywheel/model/hf_export.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "flywheel/core/file_util.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/hf_config.h"
#include "flywheel/model/hf_weights.h"
#include "flywheel/model/safetensors.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadBytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot read ", file.string()));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// The source config.json must describe the model being written, or the export would load as
// another model.
absl::Status CheckSameShape(const ModelOptions& model, const HfModelConfig& hf) {
  const ModelOptions& h = hf.model;
  const bool same = model.vocab_size == h.vocab_size && model.hidden_size == h.hidden_size &&
                    model.num_layers == h.num_layers && model.num_heads == h.num_heads &&
                    model.num_kv_heads == h.num_kv_heads && model.HeadDim() == h.HeadDim() &&
                    model.intermediate_size == h.intermediate_size &&
                    model.rope_theta == h.rope_theta && model.rope_scaling == h.rope_scaling &&
                    model.rms_norm_eps == h.rms_norm_eps &&
                    model.tie_embeddings == h.tie_embeddings &&
                    model.attention_bias == h.attention_bias && model.qk_norm == h.qk_norm;
  if (same) return absl::OkStatus();
  return absl::FailedPreconditionError(
      StrCat("export: the model's shape is not the one ", hf.source,
             " describes (was model.path changed after the run?)"));
}

}  // namespace

const char* const kHfTokenizerFiles[8] = {
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
};

absl::StatusOr<torch::ScalarType> HfSourceDtype(const fs::path& dir) {
  ASSIGN_OR_RETURN(const torch::ScalarType stored, HfWeightsDtype(dir));
  if (stored != torch::ScalarType::Undefined) return stored;
  ASSIGN_OR_RETURN(const HfModelConfig hf, LoadHfModelConfig(dir));
  if (hf.torch_dtype.empty()) return torch::kFloat32;
  return HfDtypeFromName(hf.torch_dtype);
}

absl::Status ExportHfModelDirectory(const TransformerImpl& model, const HfExportOptions& options,
                                    const fs::path& out) {
  std::error_code error;
  if (fs::exists(out, error) && !fs::is_empty(out, error)) {
    return absl::FailedPreconditionError(
        StrCat("export: ", out.string(), " exists and is not empty; give a new directory"));
  }
  fs::create_directories(out, error);
  if (error) {
    return absl::InternalError(
        StrCat("export: cannot create ", out.string(), ": ", error.message()));
  }
  const std::string dtype_name = HfDtypeName(options.dtype);
  nlohmann::json config;
  if (!options.source_dir.empty()) {
    ASSIGN_OR_RETURN(const HfModelConfig hf, LoadHfModelConfig(options.source_dir));
    RETURN_IF_ERROR(CheckSameShape(model.options(), hf));
    config = hf.json;
    // transformers >= 4.56 writes "dtype"; earlier versions "torch_dtype".
    config[config.contains("dtype") && !config.contains("torch_dtype") ? "dtype" : "torch_dtype"] =
        dtype_name;
  } else {
    config = HfConfigJsonFor(model.options(), dtype_name);
  }
  RETURN_IF_ERROR(WriteFileAtomically(out / "config.json", config.dump(2) + "\n"));

  NamedTensors tensors;
  for (const auto& item : model.named_parameters()) tensors.emplace_back(item.key(), item.value());
  RETURN_IF_ERROR(WriteSafetensors((out / kHfWeightsFile).string(), tensors, options.dtype,
                                   {{"format", "pt"}}));

  const fs::path source_generation = options.source_dir / "generation_config.json";
  if (!options.source_dir.empty() && fs::exists(source_generation)) {
    ASSIGN_OR_RETURN(const std::string bytes, ReadBytes(source_generation));
    RETURN_IF_ERROR(WriteFileAtomically(out / "generation_config.json", bytes));
  } else {
    nlohmann::json generation = {{"_from_model_config", true}};
    if (options.eos_token_ids.size() == 1) generation["eos_token_id"] = options.eos_token_ids[0];
    if (options.eos_token_ids.size() > 1) generation["eos_token_id"] = options.eos_token_ids;
    RETURN_IF_ERROR(WriteFileAtomically(out / "generation_config.json", generation.dump(2) + "\n"));
  }
  if (options.source_dir.empty()) return absl::OkStatus();
  for (const char* name : kHfTokenizerFiles) {
    const fs::path file = options.source_dir / name;
    if (!fs::exists(file)) continue;
    ASSIGN_OR_RETURN(const std::string bytes, ReadBytes(file));
    RETURN_IF_ERROR(WriteFileAtomically(out / name, bytes));
  }
  return absl::OkStatus();
}

}  // namespace flywheel
