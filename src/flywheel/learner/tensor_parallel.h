// Tensor parallelism of the transformer's decoder layers (Megatron-LM, Shoeybi et al. 2019,
// "Megatron-LM: Training Multi-Billion Parameter Language Models Using Model Parallelism"),
// composed with data parallel as a 2-D mesh: learner.world_size = DP x learner.tensor_parallel.
//
// Layout. In a TP group of T ranks, rank t holds, per decoder layer (W is [out, in]):
//
//   column slices (rows of W):   q_proj  heads [t H/T, (t+1) H/T)      (+ bias)
//                                k/v     kv heads [t KV/T, (t+1) KV/T) (+ bias)
//                                gate/up intermediate [t I/T, (t+1) I/T)
//   row slices (columns of W):   o_proj  the same query heads' inputs
//                                down    the same intermediate inputs
//   replicated (whole, every rank): embedding, the norms, the final norm, the LM head, the
//                                   per-head q/k norms (qk_norm; gradient summed over TP)
//
// Whole heads go to a rank and query head h sits with kv head h / (H/KV) (the HF repeat_kv
// order), so attention needs no communication. A layer then runs as
//
//   x ─▶ norm ─▶ f ─▶ local q/k/v ─▶ local attention ─▶ local o_proj ─▶ g ─▶ (+ x) = h
//   h ─▶ norm ─▶ f ─▶ local gate/up ─▶ silu · ─▶ local down_proj ─▶ g ─▶ (+ h)
//
//   f (TensorParallelCopy):   forward identity,             backward all-reduce (Σ over TP)
//   g (TensorParallelReduce): forward all-reduce (Σ over TP), backward identity
//
// so every TP rank has the same residual stream, logits, loss and replicated-parameter
// gradients as single-process training (up to float summation order), and the gradient of each
// slice is the slice of the full gradient.
//
// Mesh: rank = dp_index x T + tp_index. A TP group per dp_index, a DP group per tp_index, each a
// Communicator over its own PrefixStore of one store (DeviceMesh::Form):
//
//                    tp_index 0     tp_index 1
//     dp_index 0:      rank 0         rank 1       ◀─ TP group "tp/0" (f, g)
//     dp_index 1:      rank 2         rank 3       ◀─ TP group "tp/1"
//                        ▲              ▲
//                   DP group "dp/0"  DP group "dp/1"  (gradient all-reduce, data_parallel.h)
//
// The TP ranks of a DP replica run the same micro-batches (the DP rank picks them,
// AssignMicroBatches); gradients of the local parameters are summed over the DP group; the clip
// uses the global norm: Σ g² of the sliced parameters summed over the TP group, plus that of the
// replicated parameters once.
//
// Why a sliced copy of the model and a layer runner: TransformerImpl built with
// tensor_parallel = T already has local head counts and widths (its parameters are exactly this
// rank's slices, under the full model's names and order), and the existing
// TransformerImpl::SetLayerRunner hook lets this file run each layer with f and g around its
// attention and MLP, without a TP branch inside the model code. The model change is only the
// constructor argument.
//
// Not thread-safe: the learner thread owns it; the forward and backward (and so the TP
// collectives issued from them) run on that thread for CPU tensors, in the same order on every
// TP rank because every rank runs the same graph.
#ifndef FLYWHEEL_LEARNER_TENSOR_PARALLEL_H_
#define FLYWHEEL_LEARNER_TENSOR_PARALLEL_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/dist/communicator.h"
#include "flywheel/learner/learner_options.h"
#include "flywheel/model/model_options.h"
#include "flywheel/model/transformer.h"

namespace flywheel {

// learner.tensor_parallel against the model and the world: >= 1, divides learner.world_size,
// model.num_heads, model.num_kv_heads and model.intermediate_size. Errors name the keys.
absl::Status ValidateTensorParallel(const LearnerOptions& learner, const ModelOptions& model);

// Megatron's f: identity forward; the backward sums the gradient over `tp` (borrowed). Put where
// a replicated activation enters column-parallel layers.
torch::Tensor TensorParallelCopy(const torch::Tensor& x, dist::Communicator* tp);
// Megatron's g: the forward sums x over `tp`; identity backward. Put after row-parallel layers.
torch::Tensor TensorParallelReduce(const torch::Tensor& x, dist::Communicator* tp);

// The two groups of one rank in the DP x TP mesh (see the header comment).
struct DeviceMesh {
  int tensor_parallel = 1;  // T: ranks per TP group
  int data_parallel = 1;    // DP: replicas, world_size / T
  int tp_index = 0;         // this rank's rank in its TP group
  int dp_index = 0;         // this rank's rank in its DP group
  // Owned. Groups of size 1 exist too (their collectives do nothing).
  std::unique_ptr<dist::Communicator> tp_group;
  std::unique_ptr<dist::Communicator> dp_group;

  // Every rank of the world calls it with the same store (e.g. the rendezvous' TCPStore or a
  // membership epoch's PrefixStore); it returns once both of this rank's groups formed.
  static absl::StatusOr<DeviceMesh> Form(c10::intrusive_ptr<c10d::Store> store, int rank,
                                         int world_size, int tensor_parallel,
                                         const dist::CommunicatorOptions& options);
  std::string DebugString() const;
};

// How a parameter of the model is split over the TP group.
enum class TensorParallelSplit {
  kReplicated,  // whole on every rank
  kColumn,      // rows of W (dim 0; and the bias): q/k/v, gate/up
  kRow,         // columns of W (dim 1): o_proj, down_proj
};
// By Hugging Face name (transformer.h).
TensorParallelSplit SplitOfParameter(const std::string& name);

// One rank's tensor-parallel slice of the transformer, with the TP layer runner installed:
//
//   ASSIGN_OR_RETURN(auto tp, TensorParallelModel::Create(*full, mesh.tp_group.get()));
//   LearnerStep learner(options, steps, tp->parameters(), forward_of(tp->model()), …,
//                       ParallelContext{mesh.dp_group.get(), {}, nullptr, tp.get()});
//   …
//   ASSIGN_OR_RETURN(auto weights, learner.FullParameters());  // unsliced, for publishing
class TensorParallelModel {
 public:
  // Copies this rank's slices of `full` (a whole model; it may be dropped afterwards) into a
  // model built with tensor_parallel = tp->size(). `tp` is borrowed and must outlive this.
  static absl::StatusOr<std::unique_ptr<TensorParallelModel>> Create(const TransformerImpl& full,
                                                                     dist::Communicator* tp);
  ~TensorParallelModel();
  TensorParallelModel(const TensorParallelModel&) = delete;
  TensorParallelModel& operator=(const TensorParallelModel&) = delete;

  // The slice. Only its packed training path (forward with doc_lengths) computes the full
  // model's function; its parameters are what the learner trains.
  const Transformer& model() const { return model_; }
  std::vector<torch::Tensor> parameters() const { return model_->parameters(); }
  // Per parameter (parameter order).
  const std::vector<TensorParallelSplit>& splits() const { return splits_; }
  int size() const { return tp_->size(); }
  int rank() const { return tp_->rank(); }
  dist::Communicator* communicator() const { return tp_; }

  // Σ g² of the whole model's gradient: the sliced parameters' sums over the TP group plus the
  // replicated parameters' once. Every TP rank calls it.
  absl::StatusOr<double> GlobalGradSquareSum() const;
  // Copies of the whole (unsliced) parameters in the full model's order, all-gathered over the
  // TP group: every TP rank calls it, and every rank gets all of them.
  absl::StatusOr<std::vector<torch::Tensor>> FullParameters() const;

 private:
  TensorParallelModel(Transformer model, dist::Communicator* tp,
                      std::vector<TensorParallelSplit> splits);
  torch::Tensor RunLayer(const DecoderLayer& layer, const torch::Tensor& x, const Rotary& rotary,
                         const Documents& documents) const;

  Transformer model_;
  dist::Communicator* tp_;  // borrowed (Create)
  std::vector<TensorParallelSplit> splits_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_TENSOR_PARALLEL_H_
