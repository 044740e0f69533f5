#include "flywheel/model/mapped_safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; add byte swapping for this host");

// Bounds a hostile header before anything is allocated from it (HF uses 100 MB as well).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

absl::StatusOr<torch::ScalarType> DtypeFromName(const std::string& name) {
  if (name == "F32") return torch::kFloat32;
  if (name == "BF16") return torch::kBFloat16;
  if (name == "F16") return torch::kFloat16;
  return absl::InvalidArgumentError(StrCat("dtype \"", name, "\" not supported (F32, BF16, F16)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<MappedSafetensors>> MappedSafetensors::Open(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        StrCat("safetensors: cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::NotFoundError(StrCat("safetensors: cannot stat ", path, ": ", std::strerror(err)));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  const char* base = nullptr;
  if (size > 0) {  // mmap of 0 bytes is an error; an empty file is reported as truncated below
    void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapped == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(
          StrCat("safetensors: cannot map ", path, " (", size, " bytes): ", std::strerror(err)));
    }
    base = static_cast<const char*>(mapped);
  }
  ::close(fd);  // the mapping keeps the file
  std::unique_ptr<MappedSafetensors> file(new MappedSafetensors(path, base, size));

  auto corrupt = [&](const std::string& what) {
    return absl::DataLossError(
        StrCat("safetensors ", path, ": ", what, " (corrupt or truncated file)"));
  };
  if (size < 8) return corrupt(StrCat("only ", size, " bytes, no header size"));
  uint64_t header_size = 0;
  std::memcpy(&header_size, base, 8);
  if (header_size > kMaxHeaderBytes || header_size > size - 8) {
    return corrupt(StrCat("header size ", header_size, " exceeds the file (", size, " bytes)"));
  }
  const nlohmann::json header =
      nlohmann::json::parse(base + 8, base + 8 + header_size, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return corrupt("header is not a JSON object");
  file->data_begin_ = 8 + header_size;
  const uint64_t data_size = size - file->data_begin_;

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return corrupt("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) return corrupt(StrCat("__metadata__.", k, " is not a string"));
        file->metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
        !entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets") ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
      return corrupt(StrCat("tensor ", name, ": entry needs dtype, shape and data_offsets[2]"));
    }
    Entry e;
    e.name = name;
    auto dtype = DtypeFromName(entry["dtype"].get<std::string>());
    if (!dtype.ok()) {
      return Annotate(dtype.status(), StrCat("safetensors ", path, ": tensor ", name));
    }
    e.dtype = *dtype;
    uint64_t numel = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned()) return corrupt(StrCat("tensor ", name, ": bad shape"));
      e.shape.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
      if (numel > data_size) {
        return corrupt(StrCat("tensor ", name, ": shape larger than the file"));
      }
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      return corrupt(StrCat("tensor ", name, ": bad data_offsets"));
    }
    e.begin = offsets[0].get<uint64_t>();
    e.end = offsets[1].get<uint64_t>();
    const uint64_t expected = numel * c10::elementSize(e.dtype);
    if (e.end < e.begin || e.end - e.begin != expected) {
      return corrupt(StrCat("tensor ", name, ": data_offsets [", e.begin, ", ", e.end, ") hold ",
                            e.end - e.begin, " bytes, shape and dtype need ", expected));
    }
    if (e.end > data_size) {
      return corrupt(StrCat("tensor ", name, ": data ends at byte ", e.end,
                            " but the data section has ", data_size, " bytes"));
    }
    file->entries_.push_back(std::move(e));
  }
  std::stable_sort(file->entries_.begin(), file->entries_.end(),
                   [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < file->entries_.size(); ++i) file->by_name_[file->entries_[i].name] = i;
  return file;
}

MappedSafetensors::~MappedSafetensors() {
  if (base_ != nullptr) ::munmap(const_cast<char*>(base_), size_);
}

const MappedSafetensors::Entry* MappedSafetensors::Find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

torch::Tensor MappedSafetensors::View(const Entry& entry) const {
  // from_blob does not take ownership: the mapping outlives the view by contract (header).
  void* data = const_cast<char*>(base_ + data_begin_ + entry.begin);
  return torch::from_blob(data, entry.shape, torch::TensorOptions().dtype(entry.dtype));
}

}  // namespace flywheel
