// A safetensors file memory-mapped read-only: its header checked (every offset, shape and size
// against the file, as ReadSafetensors always did) and each tensor available as a view of the
// mapped bytes, without reading the file into memory first. Loading a checkpoint then copies each
// tensor once, straight from the page cache into the model's parameter (converting BF16/F16 to
// float32 on the way), instead of reading the whole file into a buffer, copying every tensor out
// of it and converting that copy.
//
//   file:  [u64 N][header JSON, N bytes][data ........................................]
//                                        ▲ View(entry) = from_blob(base + begin, shape, dtype)
//
// The views alias the mapping: they are valid while the MappedSafetensors lives and must not be
// written (the pages are mapped read-only; a write faults). Not thread-safe to destroy while a
// view is in use; reading views from several threads is fine.
#ifndef FLYWHEEL_MODEL_MAPPED_SAFETENSORS_H_
#define FLYWHEEL_MODEL_MAPPED_SAFETENSORS_H_

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel {

class MappedSafetensors {
 public:
  struct Entry {
    std::string name;
    torch::ScalarType dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0;  // byte offsets into the data section
    uint64_t end = 0;
  };

  // Maps `path` and checks its header; a corrupt or truncated file is DATA_LOSS naming the file
  // and the tensor, a missing one NOT_FOUND.
  static absl::StatusOr<std::unique_ptr<MappedSafetensors>> Open(const std::string& path);
  ~MappedSafetensors();
  MappedSafetensors(const MappedSafetensors&) = delete;
  MappedSafetensors& operator=(const MappedSafetensors&) = delete;

  const std::string& path() const { return path_; }
  // In data-offset order.
  const std::vector<Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The entry named `name`, or null.
  const Entry* Find(const std::string& name) const;
  // A CPU tensor over the mapped bytes (no copy), read-only, valid while this object lives.
  torch::Tensor View(const Entry& entry) const;

 private:
  MappedSafetensors(std::string path, const char* base, size_t size)
      : path_(std::move(path)), base_(base), size_(size) {}

  std::string path_;
  const char* base_;  // the mapping (null for an empty file), owned: unmapped by the destructor
  size_t size_;
  uint64_t data_begin_ = 0;
  std::vector<Entry> entries_;
  std::map<std::string, size_t> by_name_;  // index into entries_
  std::map<std::string, std::string> metadata_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_MAPPED_SAFETENSORS_H_
