#include "flywheel/model/safetensors.h"


#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "flywheel/core/file_util.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; add byte swapping for this host");

// Bounds a hostile header before anything is allocated from it (HF uses 100 MB as well).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

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

absl::StatusOr<torch::ScalarType> DtypeFromName(const std::string& name) {
  if (name == "F32") return torch::kFloat32;
  if (name == "BF16") return torch::kBFloat16;
  if (name == "F16") return torch::kFloat16;
  return absl::InvalidArgumentError(StrCat("dtype \"", name, "\" not supported (F32, BF16, F16)"));
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
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(StrCat("safetensors: cannot open ", path));
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto corrupt = [&](const std::string& what) {
    return absl::DataLossError(
        StrCat("safetensors ", path, ": ", what, " (corrupt or truncated file)"));
  };
  if (bytes.size() < 8) return corrupt(StrCat("only ", bytes.size(), " bytes, no header size"));
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  if (header_size > kMaxHeaderBytes || header_size > bytes.size() - 8) {
    return corrupt(
        StrCat("header size ", header_size, " exceeds the file (", bytes.size(), " bytes)"));
  }
  nlohmann::json header =
      nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + header_size, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return corrupt("header is not a JSON object");
  const uint64_t data_begin = 8 + header_size;
  const uint64_t data_size = bytes.size() - data_begin;

  SafetensorsFile out;
  std::vector<std::pair<uint64_t, std::pair<std::string, torch::Tensor>>> ordered;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return corrupt("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) return corrupt(StrCat("__metadata__.", k, " is not a string"));
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
        !entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets") ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
      return corrupt(StrCat("tensor ", name, ": entry needs dtype, shape and data_offsets[2]"));
    }
    auto dtype = DtypeFromName(entry["dtype"].get<std::string>());
    if (!dtype.ok())
      return Annotate(dtype.status(), StrCat("safetensors ", path, ": tensor ", name));
    std::vector<int64_t> shape;
    uint64_t numel = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned()) return corrupt(StrCat("tensor ", name, ": bad shape"));
      shape.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
      if (numel > data_size)
        return corrupt(StrCat("tensor ", name, ": shape larger than the file"));
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      return corrupt(StrCat("tensor ", name, ": bad data_offsets"));
    }
    const uint64_t begin = offsets[0].get<uint64_t>();
    const uint64_t end = offsets[1].get<uint64_t>();
    const uint64_t expected = numel * c10::elementSize(*dtype);
    if (end < begin || end - begin != expected) {
      return corrupt(StrCat("tensor ", name, ": data_offsets [", begin, ", ", end, ") hold ",
                            end - begin, " bytes, shape and dtype need ", expected));
    }
    if (end > data_size) {
      return corrupt(StrCat("tensor ", name, ": data ends at byte ", end,
                            " but the data section has ", data_size, " bytes"));
    }
    torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(*dtype));
    std::memcpy(t.data_ptr(), bytes.data() + data_begin + begin, expected);
    ordered.push_back({begin, {name, t}});
  }
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [offset, item] : ordered) out.tensors.push_back(std::move(item));
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
  ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensors(path));
  std::map<std::string, torch::Tensor> by_name(file.tensors.begin(), file.tensors.end());
  std::vector<std::pair<std::string, torch::Tensor>> targets;
  for (const auto& item : module.named_parameters()) targets.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) targets.emplace_back(item.key(), item.value());
  for (const auto& [name, target] : targets) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::NotFoundError(StrCat("safetensors ", path, ": missing tensor ", name));
    }
    if (it->second.sizes() != target.sizes()) {
      return absl::InvalidArgumentError(StrCat("safetensors ", path, ": tensor ", name,
                                               " has shape ", it->second.sizes(),
                                               ", the model expects ", target.sizes()));
    }
  }
  if (strict && by_name.size() != targets.size()) {
    std::set<std::string> known;
    for (const auto& [name, t] : targets) known.insert(name);
    std::vector<std::string> extra;
    for (const auto& [name, t] : by_name) {
      if (!known.contains(name)) extra.push_back(name);
    }
    return absl::InvalidArgumentError(
        StrCat("safetensors ", path, ": tensors the model does not have: ", Join(extra, ", ")));
  }
  return TorchCall(StrCat("safetensors ", path, ": copying into the model"), [&] {
    torch::NoGradGuard no_grad;
    for (auto& [name, target] : targets) target.copy_(by_name.at(name));
  });
}

}  // namespace flywheel
