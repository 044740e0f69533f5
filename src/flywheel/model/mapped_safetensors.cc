#include "flywheel/model/mapped_safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/safetensors_header.h"

namespace flywheel {
namespace {

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

  // The header's checks (model/safetensors_header.h, fuzzed without torch): every entry that
  // comes back fits the mapping, so View() may trust its shape and byte range.
  ASSIGN_OR_RETURN(SafetensorsHeader header,
                   ParseSafetensorsHeader(std::string_view(base, size), path));
  file->data_begin_ = header.data_begin;
  file->metadata_ = std::move(header.metadata);
  for (SafetensorsEntry& parsed : header.entries) {
    Entry e;
    e.name = std::move(parsed.name);
    ASSIGN_OR_RETURN(e.dtype, DtypeFromName(parsed.dtype));
    e.shape = std::move(parsed.shape);
    e.begin = parsed.begin;
    e.end = parsed.end;
    file->entries_.push_back(std::move(e));
  }
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
