#include "flywheel/learner/data_parallel.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

std::vector<std::vector<int64_t>> AssignMicroBatches(
    std::span<const PackedMicroBatch> micro_batches, int world_size) {
  const int64_t m = static_cast<int64_t>(micro_batches.size());
  const int64_t per_rank = world_size > 0 ? (m + world_size - 1) / world_size : 0;
  std::vector<int64_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return micro_batches[a].real_tokens > micro_batches[b].real_tokens;
  });
  std::vector<std::vector<int64_t>> shares(world_size);
  std::vector<int64_t> tokens(world_size, 0);
  for (int64_t i : order) {
    int best = -1;
    for (int r = 0; r < world_size; ++r) {
      if (static_cast<int64_t>(shares[r].size()) >= per_rank) continue;
      if (best < 0 || tokens[r] < tokens[best]) best = r;
    }
    shares[best].push_back(i);
    tokens[best] += micro_batches[i].real_tokens;
  }
  for (std::vector<int64_t>& share : shares) {
    std::sort(share.begin(), share.end());
    share.resize(per_rank, -1);  // padding: an all-zero-weight micro-batch
  }
  return shares;
}

PackedMicroBatch ZeroWeightMicroBatch(const PackedMicroBatch& like) {
  PackedMicroBatch mb = like;
  mb.trainable = torch::zeros_like(like.trainable);
  mb.loss_weights = torch::zeros_like(like.loss_weights);
  mb.advantages = torch::zeros_like(like.advantages);
  mb.behaviour_logprobs = torch::zeros_like(like.behaviour_logprobs);
  mb.real_tokens = 0;
  return mb;
}

GradientReducer::GradientReducer(std::vector<torch::Tensor> parameters, int64_t bucket_bytes)
    : parameters_(std::move(parameters)) {
  const int64_t n = static_cast<int64_t>(parameters_.size());
  bucket_of_.assign(n, -1);
  offset_of_.assign(n, 0);
  ready_.assign(n, false);
  // Reverse registration order: backward finishes the last layers' gradients first.
  int64_t bytes = 0;
  for (int64_t i = n - 1; i >= 0; --i) {
    const torch::Tensor& p = parameters_[i];
    const int64_t p_bytes = p.numel() * static_cast<int64_t>(p.element_size());
    const bool new_bucket = buckets_.empty() || bytes >= bucket_bytes ||
                            parameters_[buckets_.back().params.front()].dtype() != p.dtype();
    if (new_bucket) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    bucket_of_[i] = static_cast<int64_t>(buckets_.size()) - 1;
    offset_of_[i] = bytes / static_cast<int64_t>(p.element_size());
    b.params.push_back(i);
    bytes += p_bytes;
  }
  for (Bucket& b : buckets_) {
    int64_t numel = 0;
    for (int64_t i : b.params) numel += parameters_[i].numel();
    b.flat = torch::zeros({numel}, parameters_[b.params.front()].options().requires_grad(false));
  }
  hooks_.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    hooks_.push_back(
        parameters_[i].register_hook([this, i](torch::Tensor grad) { OnGradient(i, grad); }));
  }
}

GradientReducer::~GradientReducer() {
  for (size_t i = 0; i < hooks_.size(); ++i) parameters_[i].remove_hook(hooks_[i]);
}

void GradientReducer::Arm(dist::Communicator* comm) {
  comm_ = comm;
  next_launch_ = 0;
  error_ = absl::OkStatus();
  launched_in_backward_ = 0;
  in_backward_ = true;
  std::fill(ready_.begin(), ready_.end(), false);
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int64_t>(b.params.size());
    b.launched = false;
    b.work = dist::PendingCollective();
  }
}

void GradientReducer::Disarm() {
  // Collectives already launched must still complete before their buckets are reused.
  for (Bucket& b : buckets_) {
    if (b.work.valid()) b.work.Wait().IgnoreError();
  }
  comm_ = nullptr;
  in_backward_ = false;
}

void GradientReducer::OnGradient(int64_t index, const torch::Tensor& grad) {
  if (comm_ == nullptr || !error_.ok()) return;
  if (ready_[index]) {
    error_ = absl::InternalError(StrCat("gradient all-reduce: parameter ", index,
                                        " received two gradients in one backward"));
    return;
  }
  Bucket& b = buckets_[bucket_of_[index]];
  const torch::Tensor& p = parameters_[index];
  error_ = TorchCall("gradient all-reduce: bucketing a gradient", [&] {
    torch::NoGradGuard no_grad;
    // The hook runs before AccumulateGrad adds `grad` to p.grad: the final gradient of the
    // step on this rank is the two together.
    torch::Tensor slot = b.flat.narrow(0, offset_of_[index], p.numel());
    if (p.grad().defined()) {
      torch::add_out(slot, p.grad().reshape(-1), grad.reshape(-1));
    } else {
      slot.copy_(grad.reshape(-1));
    }
  });
  ready_[index] = true;
  if (--b.pending == 0) LaunchInOrder(/*all=*/false);
}

void GradientReducer::LaunchInOrder(bool all) {
  while (error_.ok() && next_launch_ < num_buckets()) {
    Bucket& b = buckets_[next_launch_];
    if (!all && b.pending > 0) return;
    if (b.pending > 0) {
      // Parameters without a gradient in this backward: their accumulated one, or zeros.
      error_ = TorchCall("gradient all-reduce: unused parameters", [&] {
        torch::NoGradGuard no_grad;
        for (int64_t i : b.params) {
          if (ready_[i]) continue;
          torch::Tensor slot = b.flat.narrow(0, offset_of_[i], parameters_[i].numel());
          if (parameters_[i].grad().defined()) {
            slot.copy_(parameters_[i].grad().reshape(-1));
          } else {
            slot.zero_();
          }
          ready_[i] = true;
        }
      });
      if (!error_.ok()) return;
      b.pending = 0;
    }
    if (next_launch_ == 0) first_launch_ = std::chrono::steady_clock::now();
    absl::StatusOr<dist::PendingCollective> work = comm_->AllReduceSum(b.flat);
    if (!work.ok()) {
      error_ = work.status();
      return;
    }
    b.work = *std::move(work);
    b.launched = true;
    if (in_backward_) ++launched_in_backward_;
    ++next_launch_;
  }
}

absl::StatusOr<CommStats> GradientReducer::Finish() {
  if (comm_ == nullptr) {
    return absl::FailedPreconditionError("gradient all-reduce: Finish without Arm");
  }
  const auto backward_end = std::chrono::steady_clock::now();
  in_backward_ = false;
  LaunchInOrder(/*all=*/true);
  absl::Status status = error_;
  for (Bucket& b : buckets_) {
    if (!b.work.valid()) continue;
    absl::Status s = b.work.Wait();
    if (status.ok()) status = s;
  }
  const auto done = std::chrono::steady_clock::now();
  comm_ = nullptr;
  if (!status.ok()) return status;
  RETURN_IF_ERROR(TorchCall("gradient all-reduce: writing the sums", [&] {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < parameters_.size(); ++i) {
      torch::Tensor& p = parameters_[i];
      const torch::Tensor sum =
          buckets_[bucket_of_[i]].flat.narrow(0, offset_of_[i], p.numel()).view(p.sizes());
      // A copy, not a view: the next step accumulates into p.grad in place while a bucket may
      // be in flight.
      if (p.grad().defined()) {
        p.mutable_grad().copy_(sum);
      } else {
        p.mutable_grad() = sum.clone();
      }
    }
  }));
  CommStats stats;
  stats.buckets = num_buckets();
  stats.launched_during_backward = launched_in_backward_;
  if (stats.buckets > 0) {
    stats.comm_seconds = Seconds(done - first_launch_);
    stats.overlapped_seconds =
        launched_in_backward_ > 0 ? std::max(0.0, Seconds(backward_end - first_launch_)) : 0.0;
  }
  return stats;
}

}  // namespace flywheel
