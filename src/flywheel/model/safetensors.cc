#include "flywheel/model/safetensors.h"


#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "flywheel/core/file_util.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/mapped_safetensors.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace {

absl::StatusOr<std::string> DtypeName(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32:
      return std::string("F32");
    case torch::kBFloat16:
      return std::string("BF16");
    case torch::kFloat16:
      return std::string("F16");
    default:
      return absl::InvalidArgumentError(
          StrCat("safetensors: dtype ", c10::toString(t), " not supported (F32, BF16, F16)"));
  }
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                              torch::ScalarType dtype,
                              const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(const std::string dtype_name, DtypeName(dtype));
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> blobs;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == "__metadata__" || !names.insert(name).second) {
      return absl::InvalidArgumentError(StrCat("safetensors ", path, ": tensor name \"", name,
                                               "\" is empty, reserved or duplicate"));
    }
    torch::Tensor blob;
    RETURN_IF_ERROR(TorchCall(StrCat("safetensors ", path, ": converting ", name),
                              [&] { blob = tensor.detach().to(torch::kCPU, dtype).contiguous(); }));
    const uint64_t bytes = blob.numel() * blob.element_size();
    header[name] = {{"dtype", dtype_name},
                    {"shape", blob.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    blobs.push_back(std::move(blob));
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // align the data section to 8 bytes
  std::string head(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(head.data(), &n, 8);
  head += json;
  std::vector<std::string_view> chunks = {head};
  for (const auto& b : blobs) {
    chunks.emplace_back(static_cast<const char*>(b.data_ptr()), b.numel() * b.element_size());
  }
  return WriteFileAtomically(path, chunks);
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  ASSIGN_OR_RETURN(const std::unique_ptr<MappedSafetensors> mapped, MappedSafetensors::Open(path));
  SafetensorsFile out;
  out.metadata = mapped->metadata();
  RETURN_IF_ERROR(TorchCall(StrCat("safetensors ", path, ": reading"), [&] {
    for (const auto& entry : mapped->entries()) {
      out.tensors.emplace_back(entry.name, mapped->View(entry).clone());
    }
  }));
  return out;
}

absl::Status SaveStateDict(const std::string& path, const torch::nn::Module& module,
                           torch::ScalarType dtype) {
  NamedTensors tensors;
  for (const auto& item : module.named_parameters()) tensors.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) tensors.emplace_back(item.key(), item.value());
  return WriteSafetensors(path, tensors, dtype, {{"format", "pt"}});
}

absl::Status LoadStateDict(const std::string& path, torch::nn::Module& module, bool strict) {
  // Mapped, so each tensor is copied once, from the page cache into the module.
  ASSIGN_OR_RETURN(const std::unique_ptr<MappedSafetensors> file, MappedSafetensors::Open(path));
  std::vector<std::pair<std::string, torch::Tensor>> targets;
  for (const auto& item : module.named_parameters()) targets.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) targets.emplace_back(item.key(), item.value());
  for (const auto& [name, target] : targets) {
    const MappedSafetensors::Entry* entry = file->Find(name);
    if (entry == nullptr) {
      return absl::NotFoundError(StrCat("safetensors ", path, ": missing tensor ", name));
    }
    if (target.sizes() != torch::IntArrayRef(entry->shape)) {
      return absl::InvalidArgumentError(StrCat("safetensors ", path, ": tensor ", name,
                                               " has shape ", torch::IntArrayRef(entry->shape),
                                               ", the model expects ", target.sizes()));
    }
  }
  if (strict && file->entries().size() != targets.size()) {
    std::set<std::string> known;
    for (const auto& [name, t] : targets) known.insert(name);
    std::vector<std::string> extra;
    for (const auto& entry : file->entries()) {
      if (!known.contains(entry.name)) extra.push_back(entry.name);
    }
    return absl::InvalidArgumentError(
        StrCat("safetensors ", path, ": tensors the model does not have: ", Join(extra, ", ")));
  }
  return TorchCall(StrCat("safetensors ", path, ": copying into the model"), [&] {
    torch::NoGradGuard no_grad;
    for (auto& [name, target] : targets) target.copy_(file->View(*file->Find(name)));
  });
}

}  // namespace flywheel
