// Data-parallel training over a process group (PyTorch DDP's design, Li et al. 2020, "PyTorch
// Distributed: Experiences on Accelerating Data Parallel Training"), in two pieces:
//
//  1. Which micro-batches a rank runs. Every rank packs the same global batch (the packer is
//     deterministic), so they agree on the micro-batches without talking; AssignMicroBatches
//     deals them out balanced by tokens, the same count to every rank.
//
//  2. GradientReducer: the gradient all-reduce (SUM) in buckets, launched while the last
//     micro-batch's backward is still running.
//
//     rank r:  mb a ─fwd/bwd─▶ mb b ─fwd/bwd─▶ … last mb ─fwd──bwd(layer L … layer 1, embed)─┐
//                                                             │ hooks: grad of p final       │
//                                                             ▼                               ▼
//              bucket 0 (last layers) ═ all-reduce ═▶ bucket 1 ═▶ … bucket k ═▶ Finish: wait,
//                                                                       p.grad = Σ_ranks grad
//
// The aggregation weights of the loss are computed over the whole optimiser step (losses.h), so
// summing the ranks' accumulated gradients gives exactly the gradient of single-process
// training on the global batch, up to float summation order; the optimiser then sees the global
// gradient and its norm (clipping is global).
//
// Buckets hold parameters in reverse registration order (backward produces the gradients of
// the last layers first), up to grad_bucket_mb each. A bucket is launched when every gradient in
// it is final and every earlier bucket has been launched, so all ranks issue the collectives in
// the same order (c10d's rule) even if their backward passes finish parameters in different
// orders. A parameter that got no gradient in the backward is sent as its accumulated gradient
// (zeros when none) by Finish.
#ifndef FLYWHEEL_LEARNER_DATA_PARALLEL_H_
#define FLYWHEEL_LEARNER_DATA_PARALLEL_H_

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/dist/communicator.h"
#include "flywheel/learner/packer.h"

namespace flywheel {

// Micro-batch indices per rank: every rank gets the same number, ceil(M / N), of micro-batches
// (all of one bucket shape), chosen greedily by decreasing real tokens to the rank with the
// fewest tokens so far (longest-processing-time first). A rank whose share is short is padded
// with -1: it runs an all-zero-weight micro-batch of the same shape (ZeroWeightMicroBatch), so
// that every rank runs the same number of forward/backward passes and its last backward, which
// drives the bucketed all-reduce, exists. Indices within a rank are ascending.
std::vector<std::vector<int64_t>> AssignMicroBatches(
    std::span<const PackedMicroBatch> micro_batches, int world_size);

// A micro-batch of the shape of `like` that trains nothing: no trainable token, all loss weights
// 0. Its backward produces zero gradients for every parameter the model uses.
PackedMicroBatch ZeroWeightMicroBatch(const PackedMicroBatch& like);

// Timing of one step's gradient communication, for the `comm_overlap` figure.
struct CommStats {
  int64_t buckets = 0;
  int64_t launched_during_backward = 0;  // buckets whose all-reduce started before backward ended
  double comm_seconds = 0;               // first bucket launched → last bucket reduced
  double overlapped_seconds = 0;         // the part of comm_seconds before the backward ended
  double exposed_seconds() const { return comm_seconds - overlapped_seconds; }
  double overlap() const { return comm_seconds > 0 ? overlapped_seconds / comm_seconds : 0.0; }
};

// Sums the gradients of `parameters` over a communicator's ranks, bucketed, overlapped with the
// backward of the step's last micro-batch (see the header comment). Hooks are registered on the
// parameters for the reducer's lifetime; they do nothing unless armed.
//
//   reducer.Arm(comm);                 // before the last micro-batch's backward
//   loss.backward();                   // buckets launch as their gradients become final
//   ASSIGN_OR_RETURN(CommStats s, reducer.Finish());   // p.grad = Σ over ranks
//
// Not thread-safe: the learner thread arms it, runs the backward (the hooks run on that thread
// for CPU tensors) and finishes it.
class GradientReducer {
 public:
  GradientReducer(std::vector<torch::Tensor> parameters, int64_t bucket_bytes);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // The next backward's gradients are all-reduced over `comm` (borrowed until Finish).
  void Arm(dist::Communicator* comm);
  // Launches what the backward did not, waits for every bucket and writes the sums into the
  // parameters' .grad. Disarms.
  absl::StatusOr<CommStats> Finish();
  // Disarms without communicating (after a failed micro-batch on this rank).
  void Disarm();

  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // Parameter indices (into `parameters`) of bucket b, in the order they sit in it.
  const std::vector<int64_t>& bucket_parameters(int64_t b) const { return buckets_[b].params; }

 private:
  struct Bucket {
    std::vector<int64_t> params;
    torch::Tensor flat;  // the bucket's gradients, concatenated; reduced in place
    int64_t pending = 0;
    bool launched = false;
    dist::PendingCollective work;
  };

  void OnGradient(int64_t index, const torch::Tensor& grad);
  void LaunchInOrder(bool all);

  std::vector<torch::Tensor> parameters_;
  std::vector<int64_t> bucket_of_;  // per parameter
  std::vector<int64_t> offset_of_;  // per parameter, into its bucket's flat
  std::vector<bool> ready_;         // per parameter: its final gradient is in the bucket
  std::vector<Bucket> buckets_;
  std::vector<unsigned> hooks_;         // per parameter, for remove_hook
  dist::Communicator* comm_ = nullptr;  // armed: borrowed until Finish
  int64_t next_launch_ = 0;
  absl::Status error_;  // the first failure seen inside a hook (hooks cannot return one)
  std::chrono::steady_clock::time_point first_launch_;
  int64_t launched_in_backward_ = 0;
  bool in_backward_ = false;
};

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_DATA_PARALLEL_H_
