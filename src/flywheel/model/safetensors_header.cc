#include "flywheel/model/safetensors_header.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; add byte swapping for this host");

// Bounds a hostile header before anything is allocated from it (HF uses 100 MB as well).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

}  // namespace

size_t SafetensorsDtypeSize(std::string_view dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  return 0;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view file,
                                                         std::string_view path) {
  auto corrupt = [&](const std::string& what) {
    return absl::DataLossError(
        StrCat("safetensors ", path, ": ", what, " (corrupt or truncated file)"));
  };
  if (file.size() < 8) return corrupt(StrCat("only ", file.size(), " bytes, no header size"));
  uint64_t header_size = 0;
  std::memcpy(&header_size, file.data(), 8);
  if (header_size > kMaxHeaderBytes || header_size > file.size() - 8) {
    return corrupt(
        StrCat("header size ", header_size, " exceeds the file (", file.size(), " bytes)"));
  }
  const nlohmann::json header =
      nlohmann::json::parse(file.begin() + 8, file.begin() + 8 + header_size, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return corrupt("header is not a JSON object");
  SafetensorsHeader out;
  out.data_begin = 8 + header_size;
  const uint64_t data_size = file.size() - out.data_begin;

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
    SafetensorsEntry e;
    e.name = name;
    e.dtype = entry["dtype"].get<std::string>();
    const size_t element_size = SafetensorsDtypeSize(e.dtype);
    if (element_size == 0) {
      return absl::InvalidArgumentError(StrCat("safetensors ", path, ": tensor ", name,
                                               ": dtype \"", e.dtype,
                                               "\" not supported (F32, BF16, F16)"));
    }
    // numel counts elements; extent multiplies the dimensions with a 0 taken as 1, so that it
    // bounds every stride torch will compute: a zero in the shape must not let another dimension
    // be anything (2^63 was read as a negative int64, and torch::empty threw).
    uint64_t numel = 1;
    uint64_t extent = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned()) return corrupt(StrCat("tensor ", name, ": bad shape"));
      const uint64_t n = d.get<uint64_t>();
      if (__builtin_mul_overflow(extent, std::max<uint64_t>(n, 1), &extent) ||
          extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return corrupt(StrCat("tensor ", name, ": shape ", entry["shape"].dump(),
                              " has more elements than an int64 counts"));
      }
      e.shape.push_back(static_cast<int64_t>(n));
      numel *= n;
      if (numel > data_size)
        return corrupt(StrCat("tensor ", name, ": shape larger than the file"));
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      return corrupt(StrCat("tensor ", name, ": bad data_offsets"));
    }
    e.begin = offsets[0].get<uint64_t>();
    e.end = offsets[1].get<uint64_t>();
    const uint64_t expected = numel * element_size;
    if (e.end < e.begin || e.end - e.begin != expected) {
      return corrupt(StrCat("tensor ", name, ": data_offsets [", e.begin, ", ", e.end, ") hold ",
                            e.end - e.begin, " bytes, shape and dtype need ", expected));
    }
    if (e.end > data_size) {
      return corrupt(StrCat("tensor ", name, ": data ends at byte ", e.end,
                            " but the data section has ", data_size, " bytes"));
    }
    out.entries.push_back(std::move(e));
  }
  std::stable_sort(
      out.entries.begin(), out.entries.end(),
      [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin; });
  return out;
}

}  // namespace flywheel
