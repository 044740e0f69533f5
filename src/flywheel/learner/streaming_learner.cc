#include "flywheel/learner/streaming_learner.h"

#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/dist/collectives.h"
#include "flywheel/learner/sharding.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace {

// The summable part of a cell's step, in the order ReduceDiagnostics sends it.
enum Sum {
  kLoss,
  kTokens,
  kRatioSum,
  kIsWeightSum,
  kClipped,
  kCapped,
  kPolicyLoss,
  kKl,
  kEntropy,
  kMicroSteps,
  kNumSums
};

// What the core sends with the new parameters, as doubles (exact for counters below 2^53).
enum Update { kStep, kVersion, kLr, kGradNorm, kClippedFlag, kNumUpdate };

}  // namespace

std::vector<std::pair<size_t, size_t>> OptimizerShardRanges(
    std::span<const torch::Tensor> parameters, int count) {
  int64_t total = 0;
  for (const torch::Tensor& p : parameters) total += p.numel();
  std::vector<std::pair<size_t, size_t>> ranges;
  size_t begin = 0;
  int64_t seen = 0;
  for (int r = 0; r < count; ++r) {
    // Shard r ends where the running count first reaches (r + 1)/count of the elements, leaving
    // at least one tensor for each shard after it.
    size_t end = begin + 1;
    seen += parameters[begin].numel();
    const size_t last = parameters.size() - static_cast<size_t>(count - 1 - r);
    while (end < last && seen < total * (r + 1) / count) seen += parameters[end++].numel();
    if (r == count - 1) end = parameters.size();
    ranges.emplace_back(begin, end);
    begin = end;
  }
  return ranges;
}

StreamingLearner::StreamingLearner(const LearnerOptions& options, int64_t run_max_steps,
                                   std::vector<torch::Tensor> parameters, PolicyForward policy,
                                   PolicyForward reference, double temperature,
                                   int64_t initial_version, Clock* clock, OptimizerShard shard)
    : options_(options),
      tracker_(clock),
      accumulator_(LossOptions::FromLearnerOptions(options), std::move(policy),
                   std::move(reference), temperature, &tracker_),
      parameters_(std::move(parameters)),
      shard_(shard) {
  const OptimizerOptions optimizer_options =
      OptimizerOptions::FromLearnerOptions(options_, run_max_steps);
  if (shard_.count < 1 || shard_.index >= shard_.count ||
      static_cast<size_t>(shard_.count) > parameters_.size()) {
    init_status_ = absl::InvalidArgumentError(
        StrCat("streaming learner: optimiser shard ", shard_.index, " of ", shard_.count, " for ",
               parameters_.size(),
               " parameter tensors (scheduler.core_cells must be at most the number of parameter "
               "tensors)"));
    optimizer_ = std::make_unique<Optimizer>(parameters_, optimizer_options, initial_version);
    return;
  }
  shard_ranges_ = OptimizerShardRanges(parameters_, shard_.count);
  std::vector<torch::Tensor> held = parameters_;  // a satellite's only keeps counters
  if (shard_.core() && shard_.count > 1) {
    const auto [begin, end] = shard_ranges_[shard_.index];
    held.assign(parameters_.begin() + begin, parameters_.begin() + end);
    optimizer_ = std::make_unique<Optimizer>(std::move(held), optimizer_options, initial_version);
    // The global norm is over the whole gradient, which every core holds after the reduce:
    // summed over all parameters in order, as one core's optimiser would.
    optimizer_->SetSquareSumReducer([all = parameters_](double) -> absl::StatusOr<double> {
      return TorchCallOr("global gradient norm", [&] {
        torch::NoGradGuard no_grad;
        double sum_sq = 0;
        for (const torch::Tensor& p : all) {
          if (p.grad().defined()) sum_sq += p.grad().to(torch::kDouble).pow(2).sum().item<double>();
        }
        return sum_sq;
      });
    });
  } else {
    optimizer_ = std::make_unique<Optimizer>(std::move(held), optimizer_options, initial_version);
  }
  if (options_.sharding != ShardingMode::kNone || options_.tensor_parallel != 1) {
    init_status_ = absl::FailedPreconditionError(
        "streaming training is data parallel only: learner.sharding must be \"none\" and "
        "learner.tensor_parallel 1");
    return;
  }
  const auto bucket_bytes = static_cast<int64_t>(options_.grad_bucket_mb * 1024 * 1024);
  init_status_ = TorchCall("streaming learner: gradient buckets", [&] {
    reducer_ = std::make_unique<GradientReducer>(parameters_, bucket_bytes);
  });
}

StreamingLearner::~StreamingLearner() = default;

absl::Status StreamingLearner::RunMicroStep(const MicroStep& micro_step) {
  const std::string context =
      StrCat("streaming step ", micro_step.step, " micro-step ", micro_step.id);
  if (!init_status_.ok()) return Annotate(init_status_, context);
  if (micro_step.version != version()) {
    return absl::FailedPreconditionError(
        StrCat(context, ": it trains from policy version ", micro_step.version,
               " but this cell holds version ", version(),
               " (a joining cell loads the core's weights first: LoadWeights)"));
  }
  absl::StatusOr<MicroBatchLoss> out = accumulator_.Accumulate(micro_step.batch);
  if (!out.ok()) return Annotate(out.status(), context);
  loss_ += out->loss;
  diagnostics_.Merge(out->diagnostics);
  ++micro_steps_;
  return absl::OkStatus();
}

void StreamingLearner::AbandonStep() {
  // Every parameter's: a core's optimiser holds only its shard's.
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : parameters_) {
    if (p.grad().defined()) {
      p.mutable_grad().detach_();
      p.mutable_grad().zero_();
    }
  }
  loss_ = 0;
  diagnostics_ = LossDiagnostics{};
  micro_steps_ = 0;
}

absl::Status StreamingLearner::ReduceDiagnostics(dist::Communicator* comm,
                                                 StreamingStepResult& result) {
  torch::Tensor sums = torch::zeros({kNumSums}, torch::kDouble);
  auto s = sums.accessor<double, 1>();
  s[kLoss] = loss_;
  s[kTokens] = static_cast<double>(diagnostics_.tokens);
  s[kRatioSum] = diagnostics_.ratio_sum;
  s[kIsWeightSum] = diagnostics_.is_weight_sum;
  s[kClipped] = static_cast<double>(diagnostics_.clipped);
  s[kCapped] = static_cast<double>(diagnostics_.capped);
  s[kPolicyLoss] = diagnostics_.policy_loss;
  s[kKl] = diagnostics_.kl;
  s[kEntropy] = diagnostics_.entropy;
  s[kMicroSteps] = static_cast<double>(micro_steps_);
  if (comm != nullptr) RETURN_IF_ERROR(comm->AllReduceSumNow(sums));
  const double d = result.normaliser;
  result.loss = s[kLoss] / d;
  result.diagnostics.tokens = static_cast<int64_t>(s[kTokens]);
  result.diagnostics.ratio_sum = s[kRatioSum];
  result.diagnostics.is_weight_sum = s[kIsWeightSum];
  result.diagnostics.clipped = static_cast<int64_t>(s[kClipped]);
  result.diagnostics.capped = static_cast<int64_t>(s[kCapped]);
  result.diagnostics.policy_loss = s[kPolicyLoss] / d;
  result.diagnostics.kl = s[kKl] / d;
  result.diagnostics.entropy = s[kEntropy] / d;
  result.micro_steps = static_cast<int64_t>(s[kMicroSteps]);
  return absl::OkStatus();
}

absl::Status StreamingLearner::ApplyOnCore(double normaliser, StreamingStepResult& result) {
  RETURN_IF_ERROR(TorchCall("normalising the summed gradient", [&] {
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : parameters_) {
      if (p.grad().defined()) p.mutable_grad().div_(normaliser);
    }
  }));
  auto timer = tracker_.Time(Phase::kOptimizer);
  ASSIGN_OR_RETURN(result.optimizer, optimizer_->Step());
  return absl::OkStatus();
}

absl::Status StreamingLearner::BroadcastUpdate(dist::Communicator& comm,
                                               StreamingStepResult& result) {
  auto timer = tracker_.Time(Phase::kOptimizer);
  torch::Tensor update = torch::zeros({kNumUpdate}, torch::kDouble);
  RETURN_IF_ERROR(TorchCall("packing the step's counters", [&] {
    auto u = update.accessor<double, 1>();
    u[kStep] = static_cast<double>(result.optimizer.step);
    u[kVersion] = static_cast<double>(result.optimizer.version);
    u[kLr] = result.optimizer.lr;
    u[kGradNorm] = result.optimizer.grad_norm;
    u[kClippedFlag] = result.optimizer.clipped ? 1.0 : 0.0;
  }));
  RETURN_IF_ERROR(comm.Broadcast(update, 0));
  // Range r of the parameters from core r, which stepped it.
  for (int r = 0; r < static_cast<int>(shard_ranges_.size()); ++r) {
    const auto [begin, end] = shard_ranges_[r];
    std::vector<torch::Tensor> views;
    int64_t numel = 0;
    for (size_t i = begin; i < end; ++i) {
      views.push_back(parameters_[i].detach());
      numel += parameters_[i].numel();
    }
    torch::Tensor flat;
    RETURN_IF_ERROR(TorchCall("packing the new parameters",
                              [&] { flat = FlattenTensors(views, numel).contiguous(); }));
    RETURN_IF_ERROR(comm.Broadcast(flat, r));
    if (comm.rank() == r) continue;
    RETURN_IF_ERROR(TorchCall("installing the new parameters", [&] {
      torch::NoGradGuard no_grad;
      UnflattenInto(flat, views);
    }));
  }
  if (comm.rank() < shard_.count) return absl::OkStatus();  // a core stepped its counters itself
  auto u = update.accessor<double, 1>();
  result.optimizer.step = static_cast<int64_t>(u[kStep]);
  result.optimizer.version = static_cast<int64_t>(u[kVersion]);
  result.optimizer.lr = u[kLr];
  result.optimizer.grad_norm = u[kGradNorm];
  result.optimizer.clipped = u[kClippedFlag] != 0.0;
  optimizer_->RestoreCounters(result.optimizer.step, result.optimizer.version);
  return absl::OkStatus();
}

absl::StatusOr<StreamingStepResult> StreamingLearner::FinishStep(dist::Communicator* participants,
                                                                 double normaliser) {
  const std::string context = StrCat("streaming step ", optimizer_->step(), ": finishing");
  if (!init_status_.ok()) return Annotate(init_status_, context);
  dist::Communicator* comm =
      participants != nullptr && participants->size() > 1 ? participants : nullptr;
  StreamingStepResult result;
  result.normaliser = normaliser;
  result.rank = comm ? comm->rank() : 0;
  result.participants = comm ? comm->size() : 1;
  result.cell_micro_steps = micro_steps_;
  // Ranks 0 … C−1 are the core cells, each stepping its own range: a mismatch would leave a
  // range unstepped or stepped twice.
  const bool applies = result.rank < shard_.count;
  if (result.participants < shard_.count || (applies && shard_.index != result.rank)) {
    AbandonStep();
    return absl::FailedPreconditionError(
        StrCat(context, ": this cell holds optimiser shard ", shard_.index, " of ", shard_.count,
               " but is rank ", result.rank, " of ", result.participants,
               " participants; the core cells must be ranks 0 … ", shard_.count - 1));
  }
  // Every participant sees the same D, so all of them skip together.
  if (!(normaliser > 0)) {
    AbandonStep();
    result.times = tracker_.EndStep();
    return absl::UnavailableError(
        StrCat(context, ": nothing trainable in the step (normaliser ", normaliser, ")"));
  }
  const int64_t bytes_before = comm ? comm->bytes_sent() : 0;
  auto fail = [&](const absl::Status& s) {
    AbandonStep();
    result.times = tracker_.EndStep();
    return Annotate(s, context);
  };
  if (comm != nullptr) {
    // Not overlapped with a backward as LearnerStep's is: a cell learns that its last
    // micro-step was the last only when the queue says none are left.
    auto timer = tracker_.Time(Phase::kBackward);
    reducer_->Arm(comm);
    absl::StatusOr<CommStats> stats = reducer_->Finish();
    if (!stats.ok()) return fail(stats.status());
  }
  if (absl::Status s = ReduceDiagnostics(comm, result); !s.ok()) return fail(s);
  absl::Status applied = absl::OkStatus();
  if (applies) applied = ApplyOnCore(normaliser, result);
  if (comm != nullptr) {
    // The satellites must not wait for parameters a failed core will never send. Every core
    // sees the same gradient and norm, so a non-finite norm fails all of them alike.
    absl::Status agreed = dist::AgreeOk(*comm, applied.ok());
    if (!applied.ok()) return fail(applied);
    if (!agreed.ok()) return fail(agreed);
    if (absl::Status s = BroadcastUpdate(*comm, result); !s.ok()) return fail(s);
  } else if (!applied.ok()) {
    return fail(applied);
  }
  result.comm_bytes = comm ? comm->bytes_sent() - bytes_before : 0;
  AbandonStep();  // the step is applied: start the next one from zero
  result.times = tracker_.EndStep();
  return result;
}

absl::Status StreamingLearner::LoadWeights(std::span<const torch::Tensor> weights, int64_t version,
                                           int64_t optimizer_step) {
  if (weights.size() != parameters_.size()) {
    return absl::InvalidArgumentError(StrCat("loading weights: ", weights.size(),
                                             " tensors for a replica of ", parameters_.size(),
                                             " parameters"));
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!weights[i].sizes().equals(parameters_[i].sizes())) {
      return absl::InvalidArgumentError(StrCat("loading weights: tensor ", i, " has shape ",
                                               weights[i].sizes(), ", the parameter ",
                                               parameters_[i].sizes()));
    }
  }
  RETURN_IF_ERROR(TorchCall("loading weights", [&] {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < weights.size(); ++i) parameters_[i].detach().copy_(weights[i]);
  }));
  optimizer_->RestoreCounters(optimizer_step, version);
  AbandonStep();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<torch::Tensor>> StreamingLearner::CopyWeights() const {
  return TorchCallOr("copying the weights", [&] {
    std::vector<torch::Tensor> out;
    for (const torch::Tensor& p : parameters_) out.push_back(p.detach().clone());
    return out;
  });
}

}  // namespace flywheel
