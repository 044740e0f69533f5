// A weight snapshot as the weights service streams it (proto/flywheel/v1/weights_service.proto):
// the snapshot's parameters by name as contiguous CPU tensors, cut into chunks of at most
// max_chunk_bytes, and the receiving side that checks every chunk and reassembles them.
//
//   learner: SnapshotTensors(snapshot) ─▶ ChunkTensors ─▶ WeightsChunk … (last = true)
//   actor:   WeightsChunk … ─▶ WeightsAssembler::Add ─▶ Finish() ─▶ SnapshotFromTensors
//
// Nothing is applied from a stream that is not whole: the assembler fills fresh tensors, and
// SnapshotFromTensors builds a new snapshot only when every parameter of the actor's model is
// present with the right dtype and shape.
#ifndef FLYWHEEL_WEIGHTS_SNAPSHOT_STREAM_H_
#define FLYWHEEL_WEIGHTS_SNAPSHOT_STREAM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/model/model_options.h"
#include "flywheel/model/safetensors.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/v1/weights_service.pb.h"
#include "flywheel/weights/chunk_checker.h"

namespace flywheel {

inline constexpr int64_t kDefaultWeightsChunkBytes = 1 << 20;
// Bounded well below gRPC's default 4 MiB message limit.
inline constexpr int64_t kMaxWeightsChunkBytes = 3 << 20;

// The snapshot's parameters by name, as contiguous CPU tensors (copied off an accelerator).
absl::StatusOr<NamedTensors> SnapshotTensors(const WeightSnapshot& snapshot);

// Safetensors dtype names ("F32", "BF16", "F16") of the dtypes a snapshot may hold.
absl::StatusOr<std::string> DtypeName(torch::ScalarType dtype);

// Streams `tensors` as version `version`: the first chunk carries the manifest, each chunk at
// most `max_chunk_bytes` of one tensor, the final one has last = true. Stops early, returning
// false, when `emit` returns false (the receiver went away).
bool ChunkTensors(int64_t version, const NamedTensors& tensors, int64_t max_chunk_bytes,
                  const std::function<bool(const v1::WeightsChunk&)>& emit);

// Reassembles one stream. Add() rejects a chunk that does not continue the stream exactly
// (another version, unknown tensor, a gap or overlap in the byte ranges, more bytes than the
// manifest says); Finish() rejects a stream that ended early. Errors name the tensor. The checks
// are WeightsChunkChecker's (chunk_checker.h, torch-free and fuzzed); this class allocates the
// manifest's tensors and copies each chunk's bytes where the checker placed them.
class WeightsAssembler {
 public:
  // The tensors the receiving model holds (ParameterSpecs). Once set, a manifest that names
  // another tensor, another shape or dtype, or leaves one out is refused before anything is
  // allocated: the manifest comes from the network, and without this only the checker's
  // per-tensor bound (kMaxWeightsTensorElements) stands between it and a terabyte allocation.
  void Expect(std::vector<WeightsTensorSpec> specs) { expected_ = std::move(specs); }

  absl::Status Add(const v1::WeightsChunk& chunk);
  // The tensors, once the chunk marked last has arrived and every byte is there.
  absl::StatusOr<NamedTensors> Finish();

  int64_t version() const { return checker_.version(); }
  int64_t bytes_received() const { return checker_.bytes_received(); }
  int64_t chunks() const { return checker_.chunks(); }

 private:
  // An empty tensor per manifest entry, once the first chunk was accepted.
  absl::Status AllocateTensors();
  // The manifest against expected_, when set.
  absl::Status CheckExpected() const;

  WeightsChunkChecker checker_;
  std::optional<std::vector<WeightsTensorSpec>> expected_;
  NamedTensors tensors_;
  bool finished_ = false;
};

// The model weights streamed for `options` are received into: on the host, in model.dtype, as
// the learner's snapshots are (so a learner and its actors agree on model.dtype, or the
// manifest's dtypes are refused by name). Throws c10::Error as the Transformer constructor.
Transformer ReceivingModel(const ModelOptions& options);

// Name, dtype, shape and bytes of each of `model`'s parameters, as a manifest lists them.
absl::StatusOr<std::vector<WeightsTensorSpec>> ParameterSpecs(const Transformer& model);

// A snapshot of ReceivingModel(options) holding exactly `tensors` as its parameters. A
// missing or unexpected tensor, or one whose shape or dtype differs from the model's, is an
// error naming it (the learner and the actor were started with different [model] configs).
absl::StatusOr<std::shared_ptr<const WeightSnapshot>> SnapshotFromTensors(
    const ModelOptions& options, int64_t version, const NamedTensors& tensors);
// The same into `model`, freshly built from the options (its parameters are overwritten).
absl::StatusOr<std::shared_ptr<const WeightSnapshot>> SnapshotFromTensors(
    Transformer model, int64_t version, const NamedTensors& tensors);

}  // namespace flywheel

#endif  // FLYWHEEL_WEIGHTS_SNAPSHOT_STREAM_H_
