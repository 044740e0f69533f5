// The checks of a weights stream (proto/flywheel/v1/weights_service.proto) without torch: does
// each WeightsChunk continue the stream exactly, and where do its bytes go. WeightsAssembler
// (snapshot_stream.h) adds the tensors the bytes are copied into; the fuzz target drives this
// class with chunks from outside, so everything the actor trusts before it allocates a tensor
// or copies a byte is decided here.
//
//   chunk 1: manifest [t0 F32 [2,3] 24 B, t1 BF16 [4] 8 B] + t0 bytes [0, 16)
//   chunk 2: t0 bytes [16, 24)      chunk 3: t1 bytes [0, 8), last = true
//   Add(chunk) ─▶ ChunkPlacement{tensor, offset, size}  (or DATA_LOSS naming the tensor)
//
// A manifest entry that comes back has a supported dtype, non-negative dimensions whose product
// (a zero taken as one) is at most 2^40, and byte_size equal to elements times the dtype's size. A
// placement lies inside its tensor and continues it where the previous chunk stopped. Not
// thread-safe: one stream, one reader.
#ifndef FLYWHEEL_WEIGHTS_CHUNK_CHECKER_H_
#define FLYWHEEL_WEIGHTS_CHUNK_CHECKER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/v1/weights_service.pb.h"

namespace flywheel {

// Elements per tensor a manifest may declare (4 TiB of F32; a model's largest matrix is far
// below).
inline constexpr int64_t kMaxWeightsTensorElements = int64_t{1} << 40;

struct WeightsTensorSpec {
  std::string name;
  std::string dtype;  // "F32", "BF16" or "F16"
  std::vector<int64_t> shape;
  int64_t byte_size = 0;
};

// Where a chunk's data belongs: `size` bytes at `offset` of manifest()[tensor]. size 0 = the
// chunk carries no bytes (a manifest-only first chunk).
struct ChunkPlacement {
  size_t tensor = 0;
  int64_t offset = 0;
  int64_t size = 0;
};

class WeightsChunkChecker {
 public:
  // Checks `chunk` against the stream so far; the first chunk's manifest becomes manifest().
  // On OK, *placement says where the chunk's data goes. After an error the stream is broken
  // and every later Add returns that error again.
  absl::Status Add(const v1::WeightsChunk& chunk, ChunkPlacement* placement);
  // OK once the chunk marked last has arrived and every tensor has all its bytes; otherwise
  // DATA_LOSS naming the first incomplete tensor.
  absl::Status Finish() const;

  bool started() const { return started_; }
  const std::vector<WeightsTensorSpec>& manifest() const { return manifest_; }
  int64_t version() const { return version_; }
  int64_t total_bytes() const { return total_bytes_; }  // the manifest's byte_size summed
  int64_t bytes_received() const { return bytes_received_; }
  int64_t chunks() const { return chunks_; }

 private:
  absl::Status Check(const v1::WeightsChunk& chunk, ChunkPlacement* placement);
  absl::Status StartManifest(const v1::WeightsChunk& chunk);
  // Moves `current_` past the tensors that are complete (zero-byte ones start complete).
  void SkipComplete();

  absl::Status broken_;
  int64_t version_ = -1;
  bool started_ = false;
  bool last_seen_ = false;
  std::vector<WeightsTensorSpec> manifest_;
  int64_t total_bytes_ = 0;
  std::vector<int64_t> filled_;  // bytes received per tensor
  size_t current_ = 0;           // the tensor the next chunk must continue
  int64_t bytes_received_ = 0;
  int64_t chunks_ = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_WEIGHTS_CHUNK_CHECKER_H_
