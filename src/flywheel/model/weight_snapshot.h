// Immutable, versioned policy weights as actors see them. The learner publishes a snapshot after
// each optimiser step; actors hold shared_ptr<const WeightSnapshot> and swap to a newer one
// between two decode steps. A snapshot owns its own copy of the parameters, so the learner can
// keep training while actors decode with it; nothing ever writes to it after MakeSnapshot.
//
//   learner ──MakeSnapshot(model, v)──▶ shared_ptr<const WeightSnapshot> ──▶ actor 1 engine
//                                                                        └─▶ actor 2 engine
#ifndef FLYWHEEL_MODEL_WEIGHT_SNAPSHOT_H_
#define FLYWHEEL_MODEL_WEIGHT_SNAPSHOT_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "flywheel/model/cpu_decoder.h"
#include "flywheel/model/transformer.h"

namespace flywheel {

struct WeightSnapshot {
  int64_t version = 0;
  Transformer model{nullptr};  // parameters do not require grad; never modified
  // The same weights in the CPU decoder's layout, built once and shared by every engine that
  // decodes this snapshot; null unless the weights are float32 on the CPU.
  std::shared_ptr<const CpuDecoderWeights> cpu_weights;
};

// Deep-copies `model`'s parameters into a new snapshot tagged `version`, on model.device in
// model.dtype (placement.h: bfloat16 copies of float32 master weights), with projections fused
// for decoding (FuseProjectionsForInference) and, for float32 weights on the CPU, the CPU
// decoder's copy (cpu_weights).
absl::StatusOr<std::shared_ptr<const WeightSnapshot>> MakeSnapshot(const Transformer& model,
                                                                   int64_t version);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_WEIGHT_SNAPSHOT_H_
