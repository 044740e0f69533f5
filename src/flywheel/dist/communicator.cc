#include "flywheel/dist/communicator.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef FLYWHEEL_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/cuda.h>
#endif

#include <exception>
#include <utility>

#include "absl/strings/match.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel::dist {
namespace {

int64_t Bytes(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

absl::Status CheckContiguous(const torch::Tensor& t, const std::string& what) {
  if (!t.defined()) return absl::InvalidArgumentError(StrCat(what, ": tensor is undefined"));
  if (!t.is_contiguous()) {
    return absl::InvalidArgumentError(StrCat(what, ": tensor must be contiguous"));
  }
  return absl::OkStatus();
}

}  // namespace

PendingCollective::PendingCollective(c10::intrusive_ptr<c10d::Work> work, std::string what,
                                     std::chrono::milliseconds timeout)
    : work_(std::move(work)), what_(std::move(what)), timeout_(timeout) {}

absl::Status PendingCollective::Wait() {
  if (!work_.defined()) return absl::FailedPreconditionError("no collective to wait for");
  c10::intrusive_ptr<c10d::Work> work = std::move(work_);
  work_ = c10::intrusive_ptr<c10d::Work>();
  absl::Status status = TorchCall(what_, [&] { work->wait(timeout_); });
  if (!status.ok() && absl::StrContains(status.message(), "imed out")) {
    return absl::DeadlineExceededError(StrCat(status.message(), " (after ", timeout_.count(),
                                              " ms; a peer rank may have died or stalled)"));
  }
  return status;
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(
    c10::intrusive_ptr<c10d::Store> store, int rank, int size, CommunicatorOptions options) {
  if (size < 1) return absl::InvalidArgumentError(StrCat(options.name, ": size must be >= 1"));
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        StrCat(options.name, ": rank ", rank, " is outside the group of ", size, " ranks"));
  }
  if (options.threads < 1) {
    return absl::InvalidArgumentError(StrCat(options.name, ": threads must be >= 1"));
  }
  c10::intrusive_ptr<C10dBackend> gloo;
  RETURN_IF_ERROR(TorchCall(
      StrCat(options.name, ": rank ", rank, " of ", size, ": joining the Gloo group"), [&] {
        auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
        gloo_options->devices.push_back(
            c10d::ProcessGroupGloo::createDeviceForHostname(options.hostname));
        gloo_options->threads = options.threads;
        gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, gloo_options);
      }));
  c10::intrusive_ptr<C10dBackend> nccl;
#ifdef FLYWHEEL_NCCL
  // Made on every rank alike (each sees a GPU or none); NCCL's communicators themselves form at
  // the first CUDA collective, which every rank issues in the same order. Its own keys in the
  // store, apart from Gloo's.
  if (torch::cuda::is_available() && size > 1) {
    RETURN_IF_ERROR(TorchCall(
        StrCat(options.name, ": rank ", rank, " of ", size, ": making the NCCL group"), [&] {
          auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
          nccl_options->timeout = options.timeout;
          nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(
              c10::make_intrusive<c10d::PrefixStore>("nccl", store), rank, size, nccl_options);
        }));
  }
#endif
  return std::unique_ptr<Communicator>(
      new Communicator(std::move(gloo), std::move(nccl), rank, size, std::move(options)));
}

Communicator::Communicator(c10::intrusive_ptr<C10dBackend> gloo,
                           c10::intrusive_ptr<C10dBackend> nccl, int rank, int size,
                           CommunicatorOptions options)
    : gloo_(std::move(gloo)),
      nccl_(std::move(nccl)),
      rank_(rank),
      size_(size),
      options_(std::move(options)) {}

C10dBackend& Communicator::BackendFor(const torch::Tensor& t) const {
  return t.is_cuda() && nccl_ ? *nccl_ : *gloo_;
}

Communicator::~Communicator() = default;

std::string Communicator::What(const char* op) const {
  return StrCat(options_.name, ": rank ", rank_, " of ", size_, ": ", op);
}

absl::StatusOr<PendingCollective> Communicator::AllReduceSum(torch::Tensor tensor) {
  const std::string what = What("all-reduce");
  RETURN_IF_ERROR(CheckContiguous(tensor, what));
  if (size_ == 1) return PendingCollective();
  c10::intrusive_ptr<c10d::Work> work;
  RETURN_IF_ERROR(TorchCall(what, [&] {
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    opts.timeout = options_.timeout;
    work = BackendFor(tensor).allreduce(tensors, opts);
  }));
  Count(2.0 * (size_ - 1) / size_ * Bytes(tensor));
  return PendingCollective(std::move(work), what, options_.timeout);
}

absl::Status Communicator::AllReduceSumNow(torch::Tensor tensor) {
  ASSIGN_OR_RETURN(PendingCollective pending, AllReduceSum(std::move(tensor)));
  if (!pending.valid()) return absl::OkStatus();
  return pending.Wait();
}

absl::Status Communicator::AllReduceMax(torch::Tensor tensor) {
  const std::string what = What("all-reduce (max)");
  RETURN_IF_ERROR(CheckContiguous(tensor, what));
  if (size_ == 1) return absl::OkStatus();
  c10::intrusive_ptr<c10d::Work> work;
  RETURN_IF_ERROR(TorchCall(what, [&] {
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::MAX;
    opts.timeout = options_.timeout;
    work = BackendFor(tensor).allreduce(tensors, opts);
  }));
  Count(2.0 * (size_ - 1) / size_ * Bytes(tensor));
  return PendingCollective(std::move(work), what, options_.timeout).Wait();
}

absl::Status Communicator::Broadcast(torch::Tensor tensor, int root) {
  const std::string what = What(StrCat("broadcast from rank ", root).c_str());
  RETURN_IF_ERROR(CheckContiguous(tensor, what));
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(StrCat(what, ": root outside the group"));
  }
  if (size_ == 1) return absl::OkStatus();
  c10::intrusive_ptr<c10d::Work> work;
  RETURN_IF_ERROR(TorchCall(what, [&] {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = options_.timeout;
    work = BackendFor(tensor).broadcast(tensors, opts);
  }));
  if (rank_ == root) Count(Bytes(tensor));
  return PendingCollective(std::move(work), what, options_.timeout).Wait();
}

absl::Status Communicator::AllGather(const torch::Tensor& shard, torch::Tensor full) {
  const std::string what = What("all-gather");
  RETURN_IF_ERROR(CheckContiguous(shard, what));
  RETURN_IF_ERROR(CheckContiguous(full, what));
  if (full.numel() != shard.numel() * size_) {
    return absl::InvalidArgumentError(StrCat(what, ": full has ", full.numel(),
                                             " elements, expected ", size_, " x ", shard.numel()));
  }
  if (size_ == 1) {
    RETURN_IF_ERROR(TorchCall(what, [&] { full.view(-1).copy_(shard.view(-1)); }));
    return absl::OkStatus();
  }
  c10::intrusive_ptr<c10d::Work> work;
  RETURN_IF_ERROR(TorchCall(what, [&] {
    // Gloo's list form: outputs are views of `full`, so no copy afterwards.
    std::vector<at::Tensor> outputs = full.view(-1).chunk(size_);
    std::vector<std::vector<at::Tensor>> output_lists{outputs};
    std::vector<at::Tensor> inputs{shard.view(-1)};
    c10d::AllgatherOptions opts;
    opts.timeout = options_.timeout;
    work = BackendFor(shard).allgather(output_lists, inputs, opts);
  }));
  Count(static_cast<double>(size_ - 1) * Bytes(shard));
  return PendingCollective(std::move(work), what, options_.timeout).Wait();
}

absl::Status Communicator::ReduceScatterSum(const torch::Tensor& full, torch::Tensor shard) {
  const std::string what = What("reduce-scatter");
  RETURN_IF_ERROR(CheckContiguous(full, what));
  RETURN_IF_ERROR(CheckContiguous(shard, what));
  if (full.numel() != shard.numel() * size_) {
    return absl::InvalidArgumentError(StrCat(what, ": full has ", full.numel(),
                                             " elements, expected ", size_, " x ", shard.numel()));
  }
  if (size_ == 1) {
    RETURN_IF_ERROR(TorchCall(what, [&] { shard.view(-1).copy_(full.view(-1)); }));
    return absl::OkStatus();
  }
  // All-to-all: slice j of every rank goes to rank j, which sums what it received. The sum runs
  // in rank order on every rank, so the result does not depend on which rank computes it.
  torch::Tensor received;
  c10::intrusive_ptr<c10d::Work> work;
  RETURN_IF_ERROR(TorchCall(what, [&] {
    received = torch::empty({size_, shard.numel()}, full.options());
    torch::Tensor input = full.view({size_, shard.numel()});
    c10d::AllToAllOptions opts;
    opts.timeout = options_.timeout;
    std::vector<int64_t> splits;  // empty = equal splits
    work = BackendFor(full).alltoall_base(received, input, splits, splits, opts);
  }));
  Count(static_cast<double>(size_ - 1) * Bytes(shard));
  RETURN_IF_ERROR(PendingCollective(std::move(work), what, options_.timeout).Wait());
  return TorchCall(what, [&] {
    torch::Tensor out = shard.view(-1);
    torch::sum_out(out, received, {0});
  });
}

absl::Status Communicator::Barrier() {
  const std::string what = What("barrier");
  if (size_ == 1) return absl::OkStatus();
  c10::intrusive_ptr<c10d::Work> work;
  RETURN_IF_ERROR(TorchCall(what, [&] {
    c10d::BarrierOptions opts;
    opts.timeout = options_.timeout;
    work = gloo_->barrier(opts);
  }));
  return PendingCollective(std::move(work), what, options_.timeout).Wait();
}

std::string Communicator::DebugString() const {
  return StrCat(options_.name, " (Gloo, rank ", rank_, " of ", size_, ", timeout ",
                options_.timeout.count(), " ms)");
}

}  // namespace flywheel::dist
