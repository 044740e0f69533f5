#include "flywheel/weights/chunk_checker.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "flywheel/core/strings.h"
#include "flywheel/model/safetensors_header.h"

namespace flywheel {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return StrCat("[", Join(shape, ", "), "]");
}

}  // namespace

absl::Status WeightsChunkChecker::StartManifest(const v1::WeightsChunk& chunk) {
  if (chunk.manifest_size() == 0) {
    return absl::DataLossError(
        StrCat("weights stream of version ", chunk.version(), ": the first chunk has no manifest"));
  }
  std::vector<WeightsTensorSpec> manifest;
  std::unordered_set<std::string> seen;
  int64_t total = 0;
  for (const v1::TensorInfo& info : chunk.manifest()) {
    const std::string where = StrCat("weights version ", chunk.version(), ", tensor ", info.name());
    if (info.name().empty()) return absl::DataLossError(StrCat(where, ": empty name"));
    if (!seen.insert(info.name()).second) {
      return absl::DataLossError(StrCat(where, ": listed twice in the manifest"));
    }
    const int64_t element_size = static_cast<int64_t>(SafetensorsDtypeSize(info.dtype()));
    if (element_size == 0) {
      return absl::DataLossError(
          StrCat(where, ": unknown dtype \"", info.dtype(), "\" (F32, BF16, F16)"));
    }
    WeightsTensorSpec spec{
        info.name(), info.dtype(), {info.shape().begin(), info.shape().end()}, info.byte_size()};
    // extent multiplies the dimensions with a 0 taken as 1: it bounds every stride torch::empty
    // computes, so a zero in the shape does not let the other dimensions be anything.
    int64_t numel = 1;
    int64_t extent = 1;
    for (int64_t d : spec.shape) {
      const int64_t at_least_one = std::max<int64_t>(d, 1);
      if (d < 0 || extent > kMaxWeightsTensorElements / at_least_one) {
        return absl::DataLossError(StrCat(where, ": bad shape ", ShapeString(spec.shape)));
      }
      extent *= at_least_one;
      numel *= d;
    }
    const int64_t expected = numel * element_size;
    if (spec.byte_size != expected) {
      return absl::DataLossError(StrCat(where, ": byte_size ", spec.byte_size, " but ", spec.dtype,
                                        " ", ShapeString(spec.shape), " is ", expected, " bytes"));
    }
    if (__builtin_add_overflow(total, expected, &total)) {
      return absl::DataLossError(
          StrCat(where, ": the manifest holds more bytes than int64 counts"));
    }
    manifest.push_back(std::move(spec));
  }
  version_ = chunk.version();
  total_bytes_ = total;
  manifest_ = std::move(manifest);
  filled_.assign(manifest_.size(), 0);
  started_ = true;
  SkipComplete();
  return absl::OkStatus();
}

void WeightsChunkChecker::SkipComplete() {
  while (current_ < manifest_.size() && filled_[current_] == manifest_[current_].byte_size) {
    ++current_;
  }
}

absl::Status WeightsChunkChecker::Add(const v1::WeightsChunk& chunk, ChunkPlacement* placement) {
  *placement = ChunkPlacement{};
  if (broken_.ok()) broken_ = Check(chunk, placement);
  return broken_;
}

absl::Status WeightsChunkChecker::Check(const v1::WeightsChunk& chunk, ChunkPlacement* placement) {
  ++chunks_;
  if (last_seen_) {
    return absl::DataLossError(
        StrCat("weights stream of version ", version_, ": a chunk after the last one"));
  }
  if (!started_) {
    if (absl::Status s = StartManifest(chunk); !s.ok()) return s;
  } else if (chunk.manifest_size() > 0) {
    return absl::DataLossError(
        StrCat("weights stream of version ", version_, ": a second manifest in chunk ", chunks_));
  }
  if (chunk.version() != version_) {
    return absl::DataLossError(StrCat("weights stream of version ", version_, ": chunk ", chunks_,
                                      " is of version ", chunk.version()));
  }
  if (!chunk.data().empty()) {
    const int64_t index = chunk.tensor_index();
    if (index < 0 || static_cast<size_t>(index) >= manifest_.size()) {
      return absl::DataLossError(StrCat("weights version ", version_, ": chunk ", chunks_,
                                        " names tensor index ", index, " of ", manifest_.size()));
    }
    const WeightsTensorSpec& spec = manifest_[index];
    const std::string where = StrCat("weights version ", version_, ", tensor ", spec.name);
    if (chunk.tensor_name() != spec.name) {
      return absl::DataLossError(
          StrCat(where, ": chunk ", chunks_, " calls it \"", chunk.tensor_name(), "\""));
    }
    if (static_cast<size_t>(index) != current_ || chunk.offset() != filled_[index]) {
      return absl::DataLossError(StrCat(
          where, ": chunk ", chunks_, " has bytes from ", chunk.offset(), " but the stream is at ",
          current_ < manifest_.size() ? manifest_[current_].name : "the end", " byte ",
          current_ < manifest_.size() ? filled_[current_] : 0, " (a gap or reordering)"));
    }
    // offset == filled_[index] <= byte_size (< 2^43), so the sum cannot overflow.
    const int64_t n = static_cast<int64_t>(chunk.data().size());
    if (chunk.offset() + n > spec.byte_size) {
      return absl::DataLossError(StrCat(where, ": chunk ", chunks_, " ends at byte ",
                                        chunk.offset() + n, " of ", spec.byte_size));
    }
    *placement = ChunkPlacement{static_cast<size_t>(index), chunk.offset(), n};
    filled_[index] += n;
    bytes_received_ += n;
    SkipComplete();
  }
  if (chunk.last()) last_seen_ = true;
  return absl::OkStatus();
}

absl::Status WeightsChunkChecker::Finish() const {
  if (!broken_.ok()) return broken_;
  if (!started_) return absl::DataLossError("weights stream ended before its first chunk");
  if (current_ < manifest_.size()) {
    return absl::DataLossError(StrCat("weights stream of version ", version_, " ended after ",
                                      bytes_received_, " of ", total_bytes_, " bytes: tensor ",
                                      manifest_[current_].name, " has ", filled_[current_], " of ",
                                      manifest_[current_].byte_size));
  }
  if (!last_seen_) {
    return absl::DataLossError(
        StrCat("weights stream of version ", version_, " ended without its last chunk"));
  }
  return absl::OkStatus();
}

}  // namespace flywheel
