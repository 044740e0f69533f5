// Fully sharded training of the transformer (learner.sharding = "full"; ZeRO-3, Rajbhandari et
// al. 2020; PyTorch FSDP, Zhao et al. 2023): between uses every parameter exists only as this
// rank's 1/N slice of its unit's flat vector (sharding.h). Each decoder layer is one unit; the
// embedding, final norm and LM head form the root unit.
//
//   step:   gather root ─▶ per micro-batch:
//             forward:  layer i: gather unit i ─▶ run layer (no grad) ─▶ free unit i
//             backward: layer i: gather unit i ─▶ recompute with grad ─▶ autograd::grad
//                       ─▶ reduce-scatter the parameter gradients into shard i's .grad ─▶ free
//           ─▶ reduce-scatter root gradients, free root ─▶ AdamW on the shards (global norm)
//
// A layer runs as a custom autograd Function (ShardedLayerFunction in the .cc) installed through
// TransformerImpl::SetLayerRunner; it saves only the layer's input, so activation memory is that
// of activation checkpointing per layer. The root unit stays gathered for the whole step, as
// FSDP keeps its root unit unsharded after forward (it is needed at both ends of every pass).
//
// Every rank runs the same number of micro-batches of the same shapes, so the per-layer
// collectives come in the same order on every rank. Not thread-safe: the learner thread owns
// it; the backward (and so the collectives issued from it) runs on that thread for CPU tensors.
#ifndef FLYWHEEL_LEARNER_FULLY_SHARDED_H_
#define FLYWHEEL_LEARNER_FULLY_SHARDED_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/dist/communicator.h"
#include "flywheel/learner/sharding.h"
#include "flywheel/model/transformer.h"

namespace flywheel {

class FullyShardedLayers {
 public:
  // `shards` (borrowed, outlives this) must use TransformerUnits: "root" and "layers.N". Installs
  // the layer runner on `transformer` (borrowed; removed again by the destructor).
  static absl::StatusOr<std::unique_ptr<FullyShardedLayers>> Create(TransformerImpl* transformer,
                                                                    FlatShards* shards);
  ~FullyShardedLayers();

  void set_communicator(dist::Communicator* comm) { comm_ = comm; }
  // Before a step's first micro-batch: gathers the root unit, forgets the previous step's calls.
  absl::Status BeginStep();
  // After the last backward: the root unit's gradients into its shard; frees the root unit.
  absl::Status EndStep();
  // After a failure: frees whatever is gathered.
  void FreeAll();

  // Implementation of the layer Function (public for it; not for other callers).
  struct LayerCall {
    int64_t index;
    DecoderLayer layer;
    Rotary rotary;
    Documents documents;
  };
  torch::Tensor Forward(int64_t call, const torch::Tensor& x);
  torch::Tensor Backward(int64_t call, const torch::Tensor& x, const torch::Tensor& grad_y);

 private:
  FullyShardedLayers(TransformerImpl* transformer, FlatShards* shards, size_t root_unit,
                     std::vector<size_t> layer_units);
  torch::Tensor Run(int64_t index, const DecoderLayer& layer, const torch::Tensor& x,
                    const Rotary& rotary, const Documents& documents);

  TransformerImpl* transformer_;  // borrowed
  FlatShards* shards_;            // borrowed
  dist::Communicator* comm_ = nullptr;
  size_t root_unit_;
  std::vector<size_t> layer_units_;  // per decoder layer: its unit
  std::vector<LayerCall> calls_;     // this step's layer calls, for their backward
};

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_FULLY_SHARDED_H_
