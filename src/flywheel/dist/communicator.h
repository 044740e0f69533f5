// Collectives of one process group, on PyTorch's distributed engine (c10d): ProcessGroupGloo for
// CPU tensors and, in a build whose LibTorch has c10d's NCCL (FLYWHEEL_NCCL) on a machine with a
// GPU, ProcessGroupNCCL for CUDA tensors — each collective goes to the backend of its tensor's
// device; without NCCL, Gloo takes CUDA tensors where it can. Every call returns a Status
// that names the group, the collective and this rank; a collective that does not complete within
// the group's timeout fails instead of hanging.
//
//   ASSIGN_OR_RETURN(auto comm, Communicator::Create(store, rank, size, {}));
//   ASSIGN_OR_RETURN(PendingCollective pending, comm->AllReduceSum(grad_bucket));  // async
//   ... more backward ...
//   RETURN_IF_ERROR(pending.Wait());
//
// The store is any c10d::Store: a TCPStore from the rendezvous (dist/rendezvous.h), wrapped in a
// PrefixStore per membership epoch, or a HashStore for ranks that are threads of one process.
//
// Gloo in LibTorch 1.13 has no reduce_scatter; ReduceScatterSum is an all-to-all of the slices
// followed by a local sum, which moves the same (N-1)/N of the tensor per rank as a ring
// reduce-scatter.
//
// Thread-safety: one thread issues the collectives of a communicator, in the same order on every
// rank (c10d's rule); Wait() on a PendingCollective may come from that thread only.
#ifndef FLYWHEEL_DIST_COMMUNICATOR_H_
#define FLYWHEEL_DIST_COMMUNICATOR_H_

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "flywheel/core/torch_compat.h"

namespace flywheel::dist {

struct CommunicatorOptions {
  // A collective that has not completed by then fails with kDeadlineExceeded.
  std::chrono::milliseconds timeout{60000};
  // Shown in errors: "learner group epoch 3".
  std::string name = "group";
  // Gloo worker threads (collectives run on them, so they overlap with the caller).
  int threads = 2;
  // The address this rank's Gloo device binds to and announces to its peers; on several hosts,
  // the address the others reach this one at.
  std::string hostname = "127.0.0.1";
};

// A collective that has been issued and may still be running.
class PendingCollective {
 public:
  PendingCollective() = default;
  PendingCollective(c10::intrusive_ptr<c10d::Work> work, std::string what,
                    std::chrono::milliseconds timeout);
  // Blocks until the collective completes (its tensors then hold the result), or fails.
  absl::Status Wait();
  bool valid() const { return work_.defined(); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string what_;
  std::chrono::milliseconds timeout_{0};
};

class Communicator {
 public:
  // Joins the group of `size` ranks as `rank` over `store`: every rank must call it (it waits for
  // all of them up to the timeout).
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(
      c10::intrusive_ptr<c10d::Store> store, int rank, int size, CommunicatorOptions options);
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const CommunicatorOptions& options() const { return options_; }

  // Sums a contiguous tensor over the ranks, in place. Asynchronous: the tensor must stay alive
  // and untouched until Wait(). (Bucket several tensors by flattening them into one.)
  absl::StatusOr<PendingCollective> AllReduceSum(torch::Tensor tensor);
  absl::Status AllReduceSumNow(torch::Tensor tensor);
  // Max over ranks, in place (used for agreement checks, e.g. "did any rank fail").
  absl::Status AllReduceMax(torch::Tensor tensor);
  // Copies `tensor` of rank `root` into `tensor` on every rank, in place.
  absl::Status Broadcast(torch::Tensor tensor, int root);
  // `full` (contiguous, numel = size × shard.numel()) = concatenation of every rank's `shard`
  // in rank order.
  absl::Status AllGather(const torch::Tensor& shard, torch::Tensor full);
  // `shard` = Σ over ranks of their `full`'s slice number rank() (numel(full) = size × numel(shard)).
  absl::Status ReduceScatterSum(const torch::Tensor& full, torch::Tensor shard);
  absl::Status Barrier();

  // Bytes this rank has sent through collectives so far (payload, as a ring algorithm moves it:
  // 2(N-1)/N × bytes for an all-reduce, (N-1)/N for all-gather and reduce-scatter).
  int64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }

  std::string DebugString() const;

 private:
  Communicator(c10::intrusive_ptr<C10dBackend> gloo, c10::intrusive_ptr<C10dBackend> nccl,
               int rank, int size, CommunicatorOptions options);
  std::string What(const char* op) const;
  // The backend for collectives on `t`: NCCL for a CUDA tensor when there is one, else Gloo.
  C10dBackend& BackendFor(const torch::Tensor& t) const;
  void Count(double bytes) {
    bytes_sent_.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  }

  c10::intrusive_ptr<C10dBackend> gloo_;
  c10::intrusive_ptr<C10dBackend> nccl_;  // null without FLYWHEEL_NCCL or a GPU
  int rank_;
  int size_;
  CommunicatorOptions options_;
  std::atomic<int64_t> bytes_sent_{0};
};

}  // namespace flywheel::dist

#endif  // FLYWHEEL_DIST_COMMUNICATOR_H_
