#include "flywheel/model/hf_weights.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/mapped_safetensors.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;

// The files and, for a sharded checkpoint, which file the index puts each tensor in.
struct WeightLayout {
  std::vector<fs::path> files;
  bool indexed = false;
  std::map<std::string, std::string> weight_map;  // tensor name → file name
};

absl::StatusOr<WeightLayout> ReadLayout(const fs::path& dir) {
  WeightLayout layout;
  const fs::path index = dir / kHfWeightsIndexFile;
  if (fs::exists(index)) {
    std::ifstream in(index, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    const nlohmann::json json =
        nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (!in || json.is_discarded() || !json.is_object() || !json.contains("weight_map") ||
        !json["weight_map"].is_object()) {
      return absl::InvalidArgumentError(
          StrCat(index.string(), ": expected a JSON object with a \"weight_map\" object"));
    }
    layout.indexed = true;
    std::set<std::string> seen;
    for (const auto& [name, file] : json["weight_map"].items()) {
      // Only plain file names in the directory: an index must not reach elsewhere.
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos ||
          file.get<std::string>().empty() || file.get<std::string>().starts_with(".")) {
        return absl::InvalidArgumentError(StrCat(index.string(), ": weight_map[\"", name,
                                                 "\"] = ", file.dump(),
                                                 " is not a file name in the model directory"));
      }
      layout.weight_map[name] = file.get<std::string>();
      if (seen.insert(file.get<std::string>()).second) layout.files.push_back(dir / file);
    }
    return layout;
  }
  const fs::path single = dir / kHfWeightsFile;
  if (fs::exists(single)) {
    layout.files.push_back(single);
    return layout;
  }
  return absl::NotFoundError(StrCat(
      "model directory ", dir.string(), ": neither ", kHfWeightsFile, " nor ", kHfWeightsIndexFile,
      " (flywheel reads safetensors checkpoints; convert a pytorch_model.bin to safetensors)"));
}

absl::StatusOr<std::vector<std::unique_ptr<MappedSafetensors>>> OpenAll(
    const std::vector<fs::path>& files) {
  std::vector<std::unique_ptr<MappedSafetensors>> mapped;
  for (const fs::path& file : files) {
    ASSIGN_OR_RETURN(std::unique_ptr<MappedSafetensors> m, MappedSafetensors::Open(file.string()));
    mapped.push_back(std::move(m));
  }
  return mapped;
}

// Derived from config.json by the model; old exports saved them as buffers.
bool IsDerivedBuffer(const std::string& name) { return name.ends_with("rotary_emb.inv_freq"); }

std::string FirstFew(const std::vector<std::string>& names) {
  constexpr size_t kShown = 8;
  if (names.size() <= kShown) return Join(names, ", ");
  return StrCat(Join(names.begin(), names.begin() + kShown, ", "), " and ", names.size() - kShown,
                " more");
}

// The one dtype of several tensors, or Undefined when they differ.
class DtypeTally {
 public:
  void Add(torch::ScalarType dtype) {
    if (count_++ == 0) dtype_ = dtype;
    if (dtype != dtype_) mixed_ = true;
  }
  torch::ScalarType dtype() const { return mixed_ ? torch::ScalarType::Undefined : dtype_; }

 private:
  int64_t count_ = 0;
  bool mixed_ = false;
  torch::ScalarType dtype_ = torch::ScalarType::Undefined;
};

}  // namespace

absl::StatusOr<std::vector<fs::path>> HfWeightFiles(const fs::path& dir) {
  ASSIGN_OR_RETURN(WeightLayout layout, ReadLayout(dir));
  return layout.files;
}

absl::StatusOr<HfWeightsSummary> LoadHfWeights(const fs::path& dir, TransformerImpl& model) {
  ASSIGN_OR_RETURN(const WeightLayout layout, ReadLayout(dir));
  ASSIGN_OR_RETURN(const auto mapped, OpenAll(layout.files));
  const std::string where = StrCat("model directory ", dir.string());

  // Where each tensor is, checked against the index.
  struct Found {
    const MappedSafetensors* file;
    const MappedSafetensors::Entry* entry;
  };
  std::map<std::string, Found> found;
  for (const auto& file : mapped) {
    const std::string file_name = fs::path(file->path()).filename().string();
    for (const auto& entry : file->entries()) {
      if (IsDerivedBuffer(entry.name)) continue;
      if (layout.indexed) {
        const auto it = layout.weight_map.find(entry.name);
        if (it == layout.weight_map.end() || it->second != file_name) {
          return absl::InvalidArgumentError(StrCat(
              where, ": tensor ", entry.name, " is in ", file_name, " but ", kHfWeightsIndexFile,
              it == layout.weight_map.end() ? " does not list it" : " puts it in " + it->second));
        }
      }
      const auto [it, inserted] = found.emplace(entry.name, Found{file.get(), &entry});
      if (!inserted) {
        return absl::InvalidArgumentError(StrCat(where, ": tensor ", entry.name, " is in both ",
                                                 it->second.file->path(), " and ", file->path()));
      }
    }
  }
  for (const auto& [name, file_name] : layout.weight_map) {
    if (!found.contains(name) && !IsDerivedBuffer(name)) {
      return absl::DataLossError(StrCat(where, ": ", kHfWeightsIndexFile, " puts tensor ", name,
                                        " in ", file_name, ", which does not have it"));
    }
  }

  const auto params = model.named_parameters();
  std::vector<std::string> missing, extra;
  for (const auto& item : params) {
    if (!found.contains(item.key())) missing.push_back(item.key());
  }
  if (!missing.empty()) {
    return absl::NotFoundError(StrCat(where, ": missing tensor(s) ", FirstFew(missing),
                                      " that config.json's model needs"));
  }
  for (const auto& [name, f] : found) {
    if (params.find(name) == nullptr) extra.push_back(name);
  }
  if (!extra.empty()) {
    const bool tied_head = model.options().tie_embeddings &&
                           std::find(extra.begin(), extra.end(), "lm_head.weight") != extra.end();
    return absl::InvalidArgumentError(
        StrCat(where, ": tensor(s) the model does not have: ", FirstFew(extra),
               tied_head ? " (config.json ties the LM head to the embeddings)" : ""));
  }
  HfWeightsSummary summary;
  summary.files = layout.files;
  DtypeTally dtypes;
  for (const auto& item : params) {
    const Found& f = found.at(item.key());
    if (item.value().sizes() != torch::IntArrayRef(f.entry->shape)) {
      return absl::InvalidArgumentError(
          StrCat(where, ": tensor ", item.key(), " in ", f.file->path(), " has shape ",
                 torch::IntArrayRef(f.entry->shape), ", config.json's model needs ",
                 item.value().sizes()));
    }
    dtypes.Add(f.entry->dtype);
    summary.bytes += static_cast<int64_t>(f.entry->end - f.entry->begin);
    ++summary.tensors;
  }
  summary.dtype = dtypes.dtype();
  RETURN_IF_ERROR(TorchCall(StrCat(where, ": copying the weights into the model"), [&] {
    torch::NoGradGuard no_grad;
    for (const auto& item : params) {
      const Found& f = found.at(item.key());
      torch::Tensor param = item.value();
      param.copy_(f.file->View(*f.entry));
    }
  }));
  return summary;
}

absl::StatusOr<torch::ScalarType> HfWeightsDtype(const fs::path& dir) {
  ASSIGN_OR_RETURN(const WeightLayout layout, ReadLayout(dir));
  ASSIGN_OR_RETURN(const auto mapped, OpenAll(layout.files));
  DtypeTally dtypes;
  for (const auto& file : mapped) {
    for (const auto& entry : file->entries()) {
      if (!IsDerivedBuffer(entry.name)) dtypes.Add(entry.dtype);
    }
  }
  return dtypes.dtype();
}

std::string HfDtypeName(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kBFloat16:
      return "bfloat16";
    case torch::kFloat16:
      return "float16";
    case torch::kFloat32:
      return "float32";
    default:
      return c10::toString(dtype);
  }
}

absl::StatusOr<torch::ScalarType> HfDtypeFromName(const std::string& name) {
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kFloat16;
  if (name == "float32") return torch::kFloat32;
  return absl::InvalidArgumentError(
      StrCat("dtype \"", name, "\" is not one of bfloat16, float16, float32"));
}

absl::StatusOr<Transformer> LoadHfModel(const fs::path& dir, const ModelOptions& options,
                                        HfWeightsSummary* summary) {
  RETURN_IF_ERROR(options.Validate());
  ASSIGN_OR_RETURN(Transformer model, TorchCallOr(StrCat("model directory ", dir.string(),
                                                         ": building the transformer"),
                                                  [&] { return Transformer(options); }));
  ASSIGN_OR_RETURN(HfWeightsSummary read, LoadHfWeights(dir, *model));
  if (summary != nullptr) *summary = std::move(read);
  return model;
}

}  // namespace flywheel
