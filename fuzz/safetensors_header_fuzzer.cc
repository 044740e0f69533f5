// safetensors checkpoints (model/safetensors_header.h): downloaded Hugging Face weights and the
// learner's own checkpoints. The input is the whole file. Whatever the header says, an entry that
// comes back must be what ReadSafetensors may trust before it calls torch::empty(shape) and
// copies end - begin bytes from the data section: a supported dtype, non-negative dimensions
// whose product (a zero taken as one, for the strides) fits in int64, elements times the dtype's
// size exactly the byte range, and the range inside the file.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "flywheel/model/safetensors_header.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<flywheel::SafetensorsHeader> header =
      flywheel::ParseSafetensorsHeader(file, "fuzz.safetensors");
  if (!header.ok()) return 0;
  Check(header->data_begin >= 8 && header->data_begin <= size);
  const uint64_t data_size = size - header->data_begin;
  uint64_t previous_begin = 0;
  for (const flywheel::SafetensorsEntry& e : header->entries) {
    const size_t element_size = flywheel::SafetensorsDtypeSize(e.dtype);
    Check(element_size > 0);
    // Every stride torch computes is at most the product with zeros taken as ones.
    int64_t numel = 1;
    int64_t extent = 1;
    for (int64_t d : e.shape) {
      Check(d >= 0);
      Check(!__builtin_mul_overflow(extent, std::max<int64_t>(d, 1), &extent));
      numel *= d;
    }
    Check(e.begin <= e.end && e.end <= data_size);
    Check(e.end - e.begin == static_cast<uint64_t>(numel) * element_size);
    Check(e.begin >= previous_begin);
    previous_begin = e.begin;
  }
  return 0;
}
