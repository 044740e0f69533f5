// Flat parameter shards (ZeRO, Rajbhandari et al. 2020; PyTorch FSDP's FlatParameter): the
// learner's parameters are grouped into units, each unit flattened into one vector padded to a
// multiple of the world size N, and rank r owns slice r of it:
//
//   unit "layers.0":  [ q_proj.weight | k_proj.weight | … | mlp.down_proj.weight | pad ]
//                     └── rank 0 ──┘└── rank 1 ──┘└── rank 2 ──┘└── rank 3 ──┘
//                      shard_length = ceil(length / N) elements each
//
// grads_optimizer (ZeRO-2) keeps the parameters replicated: after backward the gradients of
// each unit are reduce-scattered into the rank's shard (the full gradients are freed), AdamW
// steps the shards only, and the updated shards are all-gathered back into the parameters.
// AdamW is elementwise, so stepping flat slices equals stepping the tensors they came from.
//
// full (ZeRO-3 / FSDP, fully_sharded.h) keeps the parameters as shards only: a unit's
// parameters get storage (GatherUnit) just before their compute and lose it after (FreeUnit),
// and each unit's gradients are reduce-scattered into its shard as soon as they exist.
//
// The same layout is what a sharded checkpoint stores (sharded_checkpoint.h), whatever the
// sharding mode; loading at another N re-slices each unit's flat vector.
#ifndef FLYWHEEL_LEARNER_SHARDING_H_
#define FLYWHEEL_LEARNER_SHARDING_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/dist/communicator.h"

namespace flywheel {

// Parameters flattened together; indices into the learner's parameter list, in flat order.
struct ShardUnit {
  std::string name;
  std::vector<int64_t> parameters;
};

// One unit per decoder layer ("layers.N", from HF names "model.layers.N.…"), everything else
// (embedding, final norm, LM head) in "root", the first unit. Indices follow `names`' order.
std::vector<ShardUnit> TransformerUnits(std::span<const std::string> names);
// All parameters in one unit "all" (the default when the model's structure is unknown).
std::vector<ShardUnit> SingleUnit(int64_t num_parameters);
absl::Status ValidateUnits(std::span<const ShardUnit> units, int64_t num_parameters);

inline int64_t ShardLength(int64_t length, int world_size) {
  return (length + world_size - 1) / world_size;
}

// `tensors` flattened and concatenated, zero-padded to `padded_length` elements (detached).
torch::Tensor FlattenTensors(std::span<const torch::Tensor> tensors, int64_t padded_length);
// Copies consecutive pieces of `flat` into `outputs` (shapes from the outputs).
void UnflattenInto(const torch::Tensor& flat, std::span<const torch::Tensor> outputs);

// This rank's slices of each unit's flat training state: what one shard of a sharded checkpoint
// holds. With world_size 1 the slices are the whole units (unpadded: length elements).
struct TrainerShard {
  int world_size = 1;
  int rank = 0;
  int64_t step = 0;       // optimiser steps taken
  int64_t version = 0;    // policy version
  int64_t adam_step = 0;  // AdamW's bias-correction step count
  std::vector<std::string> unit_names;
  std::vector<int64_t> unit_lengths;                       // unpadded
  std::vector<torch::Tensor> params, exp_avg, exp_avg_sq;  // per unit, [shard_length]
};

// ZeRO-2 state of one rank: the flat shards the optimiser steps, and the collectives that move
// gradients into them and parameters out of them. Not thread-safe: the learner thread owns it.
class FlatShards {
 public:
  // `parameters` are the model's (replicated, identical on every rank); the shards start as
  // this rank's slices of them.
  static absl::StatusOr<std::unique_ptr<FlatShards>> Create(std::vector<torch::Tensor> parameters,
                                                            std::vector<ShardUnit> units,
                                                            int world_size, int rank);

  // Leaf tensors [shard_length] per unit: the parameters of the optimiser; .grad after
  // ReduceScatterGrads.
  const std::vector<torch::Tensor>& shards() const { return shards_; }
  // Σ over ranks of each unit's flat gradient, slice `rank`, into shards()[u].grad; frees the
  // parameters' full gradients (ZeRO-2 keeps only the shard).
  absl::Status ReduceScatterGrads(dist::Communicator& comm);
  // Every rank's updated shard into the (replicated) parameters.
  absl::Status AllGatherParams(dist::Communicator& comm);

  // Σ over ranks of `grads` (the unit's parameter gradients, undefined = zeros), slice `rank`,
  // into (accumulate) or as (overwrite) the unit's shard gradient.
  absl::Status ReduceScatterUnit(size_t u, std::span<const torch::Tensor> grads,
                                 dist::Communicator& comm, bool accumulate);
  // Fully sharded: the unit's parameters become views of the all-gathered flat unit (full
  // shapes, their own storage), or hold no storage at all (0 elements).
  absl::Status GatherUnit(size_t u, dist::Communicator& comm);
  void FreeUnit(size_t u);
  // Copies of every parameter, whole, gathered from the shards (parameter order).
  absl::StatusOr<std::vector<torch::Tensor>> GatherCopies(dist::Communicator& comm) const;

  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  const std::vector<ShardUnit>& units() const { return units_; }
  int64_t unit_length(size_t u) const { return lengths_[u]; }
  int64_t shard_length(size_t u) const { return ShardLength(lengths_[u], world_size_); }
  // The unit's parameters as tensors.
  std::vector<torch::Tensor> UnitParameters(size_t u) const;

 private:
  FlatShards(std::vector<torch::Tensor> parameters, std::vector<ShardUnit> units, int world_size,
             int rank);

  std::vector<torch::Tensor> parameters_;
  std::vector<ShardUnit> units_;
  std::vector<int64_t> lengths_;
  int world_size_;
  int rank_;
  std::vector<torch::Tensor> shards_;
  std::vector<std::vector<int64_t>> shapes_;  // per parameter, as built (before any FreeUnit)
};

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_SHARDING_H_
