// The header of a safetensors file (https://huggingface.co/docs/safetensors), checked without
// torch: what a reader may trust before it allocates a tensor or copies a byte.
//
//   [u64 little-endian N][N bytes JSON header][data section ............................]
//                                             ▲ data_begin = 8 + N
//   header: {"__metadata__": {"format": "pt"},
//            "model.norm.weight": {"dtype": "F32", "shape": [128], "data_offsets": [0, 512]}}
//
// Every entry that comes back holds: a supported dtype, a shape whose product is the number of
// elements, data_offsets [begin, end) whose length is that many elements of the dtype, and
// end within the data section. A file that breaks any of it is DATA_LOSS naming the file and the
// tensor (an unsupported dtype: INVALID_ARGUMENT), never a crash: the file comes from outside
// (a downloaded checkpoint).
#ifndef FLYWHEEL_MODEL_SAFETENSORS_HEADER_H_
#define FLYWHEEL_MODEL_SAFETENSORS_HEADER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "BF16" or "F16"
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t data_begin = 0;                // where the data section starts in the file
  std::vector<SafetensorsEntry> entries;  // in data-offset order
  std::map<std::string, std::string> metadata;
};

// Bytes per element of a supported dtype name ("F32" 4, "BF16" and "F16" 2), 0 for any other.
size_t SafetensorsDtypeSize(std::string_view dtype);

// Checks the header of `file` (the whole file's bytes) against the file; `path` names it in
// errors.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view file,
                                                         std::string_view path);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_SAFETENSORS_HEADER_H_
