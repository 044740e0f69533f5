#include "flywheel/learner/learner_step.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/learner/advantages.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {

nlohmann::json LearnerStepResult::ToJson() const {
  nlohmann::json lags = nlohmann::json::object();
  for (const auto& [lag, count] : staleness.lag_counts) lags[std::to_string(lag)] = count;
  return {{"step", optimizer.step},
          {"version", optimizer.version},
          {"lr", optimizer.lr},
          {"grad_norm", optimizer.grad_norm},
          {"loss", loss},
          {"policy_loss", diagnostics.policy_loss},
          {"kl", diagnostics.kl},
          {"entropy", diagnostics.entropy},
          {"trainable_tokens", diagnostics.tokens},
          {"mean_ratio", diagnostics.mean_ratio()},
          {"mean_is_weight", diagnostics.mean_is_weight()},
          {"clip_fraction", diagnostics.clip_fraction()},
          {"is_cap_fraction", diagnostics.is_cap_fraction()},
          {"kept", staleness.kept},
          {"dropped_stale", staleness.dropped},
          {"lags", lags},
          {"bucket", bucket},
          {"micro_batches", micro_batches},
          {"padding_waste", padding_waste},
          {"held_back", held_back},
          {"dropped_too_long", dropped_too_long},
          {"times", times.ToJson()},
          {"rank", rank},
          {"world_size", world_size},
          {"rank_micro_batches", rank_micro_batches},
          {"tp_rank", tp_rank},
          {"tensor_parallel", tensor_parallel},
          {"comm_bytes", comm_bytes},
          {"comm_seconds", comm.comm_seconds},
          {"comm_overlap", comm.overlap()},
          {"param_bytes", param_bytes},
          {"grad_bytes", grad_bytes},
          {"optimizer_bytes", optimizer_bytes}};
}

LearnerStep::LearnerStep(const LearnerOptions& options, int64_t run_max_steps,
                         std::vector<torch::Tensor> parameters, PolicyForward policy,
                         PolicyForward reference, double temperature, Clock* clock,
                         int64_t initial_version, ParallelContext parallel)
    : options_(options),
      loss_options_(LossOptions::FromLearnerOptions(options)),
      advantage_kind_(options.advantage),
      accumulator_(loss_options_, std::move(policy), std::move(reference), temperature, &tracker_),
      staleness_(options.max_staleness),
      packer_(PackerOptions::FromLearnerOptions(options)),
      parameters_(std::move(parameters)),
      units_(parallel.units.empty() ? SingleUnit(static_cast<int64_t>(parameters_.size()))
                                    : std::move(parallel.units)),
      run_max_steps_(run_max_steps),
      initial_version_(initial_version),
      transformer_(parallel.transformer),
      tensor_parallel_(parallel.tensor_parallel),
      tracker_(clock) {
  init_status_ = ValidateUnits(units_, static_cast<int64_t>(parameters_.size()));
  if (init_status_.ok()) init_status_ = SetCommunicator(parallel.communicator);
  if (!optimizer_) {
    optimizer_ = std::make_unique<Optimizer>(
        parameters_, OptimizerOptions::FromLearnerOptions(options_, run_max_steps_),
        initial_version_);
  }
  if (init_status_.ok()) init_status_ = SetUpTensorParallel();
}

absl::Status LearnerStep::SetUpTensorParallel() {
  const int64_t t = options_.tensor_parallel;
  if (tensor_parallel_ == nullptr) {
    if (t == 1) return absl::OkStatus();
    return absl::FailedPreconditionError(
        StrCat("learner.tensor_parallel = ", t,
               " needs this rank's slice of the model (ParallelContext.tensor_parallel)"));
  }
  if (tensor_parallel_->size() != t) {
    return absl::FailedPreconditionError(StrCat("learner.tensor_parallel = ", t,
                                                " but the TP group has ", tensor_parallel_->size(),
                                                " ranks"));
  }
  if (options_.sharding != ShardingMode::kNone) {
    return absl::FailedPreconditionError(
        "learner.tensor_parallel > 1 works with learner.sharding = \"none\" only");
  }
  if (tensor_parallel_->splits().size() != parameters_.size()) {
    return absl::FailedPreconditionError(
        StrCat("tensor parallel: the learner has ", parameters_.size(),
               " parameters, the TP slice of the model ", tensor_parallel_->splits().size(),
               " (pass its parameters())"));
  }
  // Each rank sees its slices' gradients: the clip needs the norm of the whole model's.
  optimizer_->SetSquareSumReducer(
      [this](double) -> absl::StatusOr<double> { return tensor_parallel_->GlobalGradSquareSum(); });
  return absl::OkStatus();
}

LearnerStep::~LearnerStep() = default;

absl::Status LearnerStep::SetCommunicator(dist::Communicator* communicator) {
  if (options_.sharding != ShardingMode::kNone) {
    const char* mode = options_.sharding == ShardingMode::kFull ? "full" : "grads_optimizer";
    if (communicator == nullptr) {
      return absl::FailedPreconditionError(
          StrCat("learner.sharding = \"", mode, "\" needs a process group (a communicator)"));
    }
    if (shards_ && (shards_->world_size() != communicator->size() ||
                    shards_->rank() != communicator->rank())) {
      return absl::FailedPreconditionError(
          StrCat("learner.sharding = \"", mode, "\": the group changed from rank ", shards_->rank(),
                 " of ", shards_->world_size(), " to rank ", communicator->rank(), " of ",
                 communicator->size(), "; re-shard through a sharded checkpoint"));
    }
    comm_ = communicator;
    if (!shards_) RETURN_IF_ERROR(BuildShards());
    if (options_.sharding == ShardingMode::kFull && !fully_sharded_) {
      ASSIGN_OR_RETURN(fully_sharded_, FullyShardedLayers::Create(transformer_, shards_.get()));
    }
    if (fully_sharded_) fully_sharded_->set_communicator(comm_);
    return absl::OkStatus();
  }
  comm_ = communicator;
  if (comm_ != nullptr && !reducer_) {
    const auto bucket_bytes = static_cast<int64_t>(options_.grad_bucket_mb * 1024 * 1024);
    RETURN_IF_ERROR(TorchCall("data parallel: gradient buckets", [&] {
      reducer_ = std::make_unique<GradientReducer>(parameters_, bucket_bytes);
    }));
  }
  return absl::OkStatus();
}

absl::Status LearnerStep::BuildShards() {
  ASSIGN_OR_RETURN(shards_, FlatShards::Create(parameters_, units_, comm_->size(), comm_->rank()));
  optimizer_ = std::make_unique<Optimizer>(
      shards_->shards(), OptimizerOptions::FromLearnerOptions(options_, run_max_steps_),
      initial_version_);
  // Each rank sees the gradient of its shard only: the clip needs the global norm.
  optimizer_->SetSquareSumReducer([this](double local) -> absl::StatusOr<double> {
    torch::Tensor t = torch::tensor({local}, torch::kDouble);
    RETURN_IF_ERROR(comm_->AllReduceSumNow(t));
    return t.item<double>();
  });
  return absl::OkStatus();
}

void LearnerStep::ClearGradients() {
  optimizer_->ZeroGrad();
  if (shards_) {
    for (torch::Tensor& p : parameters_) p.mutable_grad() = torch::Tensor();
  }
}

absl::Status LearnerStep::ReduceGradients(LearnerStepResult& result) {
  if (reducer_ && comm_ != nullptr) {
    auto timer = tracker_.Time(Phase::kBackward);  // what the backward did not hide
    ASSIGN_OR_RETURN(result.comm, reducer_->Finish());
  }
  if (fully_sharded_) {
    auto timer = tracker_.Time(Phase::kBackward);  // the layers' reduce-scatters ran in backward
    RETURN_IF_ERROR(fully_sharded_->EndStep());
  } else if (shards_) {
    auto timer = tracker_.Time(Phase::kOptimizer);
    RETURN_IF_ERROR(shards_->ReduceScatterGrads(*comm_));
  }
  return absl::OkStatus();
}

void LearnerStep::MeasureHeldBytes(LearnerStepResult& result) const {
  auto bytes = [](const torch::Tensor& t) {
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : int64_t{0};
  };
  result.param_bytes = result.grad_bytes = result.optimizer_bytes = 0;
  for (const torch::Tensor& p : parameters_) {
    result.param_bytes += bytes(p);
    result.grad_bytes += bytes(p.grad());
  }
  for (const torch::Tensor& p : optimizer_->parameters()) {
    if (fully_sharded_) result.param_bytes += bytes(p);  // the shards are the parameters
    if (shards_) result.grad_bytes += bytes(p.grad());
    result.optimizer_bytes += optimizer_->StateBytes(p);
  }
}

absl::Status LearnerStep::AccumulateMicroBatch(const PackedMicroBatch& mb,
                                               LearnerStepResult& result) {
  ASSIGN_OR_RETURN(MicroBatchLoss out, accumulator_.Accumulate(mb));
  result.loss += out.loss;
  result.diagnostics.Merge(out.diagnostics);
  return absl::OkStatus();
}

absl::StatusOr<LearnerStepResult> LearnerStep::Step(std::vector<Trajectory> batch) {
  const std::string context = StrCat("learner step ", optimizer_->step());
  if (!init_status_.ok()) return Annotate(init_status_, context);
  if (advantage_kind_ == AdvantageKind::kVtrace) {
    return absl::FailedPreconditionError(
        StrCat(context,
               ": learner.advantage = \"vtrace\" needs a value head, which this "
               "policy does not provide"));
  }
  if (options_.kl_coef > 0 && !accumulator_.has_reference()) {
    return absl::FailedPreconditionError(
        StrCat(context, ": learner.kl_coef > 0 needs a reference model"));
  }
  LearnerStepResult result;
  PackedStep packed;
  disposition_ = BatchDisposition();
  {
    auto timer = tracker_.Time(Phase::kOther, "pack");
    std::vector<std::string> given;
    given.reserve(batch.size());
    for (const Trajectory& t : batch) given.push_back(t.id);
    result.staleness = staleness_.Apply(optimizer_->version(), batch);
    // Apply keeps the order: what is missing from the kept ones was dropped as stale.
    for (size_t g = 0, k = 0; g < given.size(); ++g) {
      if (k < batch.size() && batch[k].id == given[g]) {
        ++k;
      } else {
        disposition_.stale.push_back(std::move(given[g]));
      }
    }
    ASSIGN_OR_RETURN(std::vector<std::vector<float>> advantages,
                     ComputeAdvantages(batch, AdvantageOptions::FromLearnerOptions(options_)));
    // Held trajectories go first; they too must still be within the staleness bound.
    std::vector<Trajectory> input;
    std::vector<std::vector<float>> input_advantages;
    for (size_t i = 0; i < held_.size(); ++i) {
      const int64_t lag = StalenessFilter::Lag(held_[i], optimizer_->version());
      if (options_.max_staleness >= 0 && lag > options_.max_staleness) {
        ++result.staleness.dropped;
        MetricsRegistry::Global().GetCounter("learner.dropped{reason=stale}")->Increment();
        disposition_.stale.push_back(held_[i].id);
        continue;
      }
      input.push_back(std::move(held_[i]));
      input_advantages.push_back(std::move(held_advantages_[i]));
    }
    const int64_t carried = static_cast<int64_t>(input.size());
    held_.clear();
    held_advantages_.clear();
    for (size_t i = 0; i < batch.size(); ++i) {
      input.push_back(std::move(batch[i]));
      input_advantages.push_back(std::move(advantages[i]));
    }
    ASSIGN_OR_RETURN(packed, packer_.Pack(input, input_advantages, carried));
    disposition_.too_long = packed.dropped_too_long;
    {
      std::vector<bool> out(input.size(), false);
      for (int64_t i : packed.held_back) {
        out[static_cast<size_t>(i)] = true;
        disposition_.held_back.push_back(input[static_cast<size_t>(i)].id);
      }
      const absl::flat_hash_set<std::string> too_long(packed.dropped_too_long.begin(),
                                                      packed.dropped_too_long.end());
      for (size_t i = 0; i < input.size(); ++i) {
        if (!out[i] && !too_long.contains(input[i].id)) disposition_.trained.push_back(input[i].id);
      }
    }
    for (int64_t i : packed.held_back) {
      held_.push_back(std::move(input[i]));
      held_advantages_.push_back(std::move(input_advantages[i]));
    }
  }
  result.bucket = packed.bucket;
  result.micro_batches = static_cast<int64_t>(packed.micro_batches.size());
  result.padding_waste = packed.padding_waste();
  result.held_back = static_cast<int64_t>(packed.held_back.size());
  result.dropped_too_long = static_cast<int64_t>(packed.dropped_too_long.size());
  if (packed.micro_batches.empty() || packed.trainable_tokens == 0) {
    tracker_.EndStep();
    return absl::UnavailableError(StrCat(
        context, ": nothing to train on after filtering (", result.staleness.dropped, " stale, ",
        result.dropped_too_long, " too long, ", result.held_back, " held for the next step)"));
  }

  // This rank's share of the micro-batches (all of them in one process).
  result.rank = rank();
  result.world_size = world_size();
  if (tensor_parallel_ != nullptr) {
    result.tp_rank = tensor_parallel_->rank();
    result.tensor_parallel = tensor_parallel_->size();
  }
  std::vector<int64_t> mine;
  if (result.world_size == 1) {
    for (int64_t i = 0; i < result.micro_batches; ++i) mine.push_back(i);
  } else {
    mine = AssignMicroBatches(packed.micro_batches, result.world_size)[result.rank];
  }
  result.rank_micro_batches = static_cast<int64_t>(mine.size());
  const int64_t bytes_before = comm_ ? comm_->bytes_sent() : 0;

  // Data parallel: the reducer sums gradients over the group (none without one).
  GradientReducer* reducer = comm_ != nullptr ? reducer_.get() : nullptr;
  ClearGradients();
  if (fully_sharded_) {
    if (const absl::Status s = fully_sharded_->BeginStep(); !s.ok()) {
      fully_sharded_->FreeAll();
      tracker_.EndStep();
      return Annotate(s, context);
    }
  }
  for (size_t k = 0; k < mine.size(); ++k) {
    // The last backward drives the bucketed all-reduce (data_parallel.h).
    if (k + 1 == mine.size() && reducer) reducer->Arm(comm_);
    PackedMicroBatch padding;
    if (mine[k] < 0) padding = ZeroWeightMicroBatch(packed.micro_batches.front());
    const absl::Status s =
        AccumulateMicroBatch(mine[k] < 0 ? padding : packed.micro_batches[mine[k]], result);
    if (!s.ok()) {
      if (reducer) reducer->Disarm();
      if (fully_sharded_) fully_sharded_->FreeAll();
      ClearGradients();
      tracker_.EndStep();
      return Annotate(s, context);
    }
  }
  if (const absl::Status s = ReduceGradients(result); !s.ok()) {
    if (fully_sharded_) fully_sharded_->FreeAll();
    ClearGradients();
    tracker_.EndStep();
    return Annotate(s, context);
  }
  absl::StatusOr<OptimizerStepInfo> info;
  absl::Status gathered = absl::OkStatus();
  {
    auto timer = tracker_.Time(Phase::kOptimizer);
    info = optimizer_->Step();
    // ZeRO-2 replicates the parameters again; fully sharded, they stay in the shards.
    if (info.ok() && shards_ && !fully_sharded_) gathered = shards_->AllGatherParams(*comm_);
  }
  result.times = tracker_.EndStep();
  if (!info.ok()) return Annotate(info.status(), context);
  if (!gathered.ok()) return Annotate(gathered, context);
  result.optimizer = *info;
  result.comm_bytes = comm_ ? comm_->bytes_sent() - bytes_before : 0;
  MeasureHeldBytes(result);
  return result;
}

}  // namespace flywheel

namespace flywheel {

int64_t LearnerStep::UnitLength(size_t u) const {
  if (shards_) return shards_->unit_length(u);  // fully sharded parameters hold no storage
  int64_t length = 0;
  for (int64_t i : units_[u].parameters) length += parameters_[i].numel();
  return length;
}

absl::StatusOr<TrainerShard> LearnerStep::ExportShard() {
  if (tensor_parallel_ != nullptr) {
    return absl::UnimplementedError(
        "sharded checkpoints of a tensor-parallel learner (learner.tensor_parallel > 1)");
  }
  TrainerShard out;
  out.world_size = world_size();
  out.rank = rank();
  out.step = optimizer_->step();
  out.version = optimizer_->version();
  RETURN_IF_ERROR(TorchCall("exporting the training state", [&] {
    torch::NoGradGuard no_grad;
    for (size_t u = 0; u < units_.size(); ++u) {
      std::vector<torch::Tensor> params, exp_avg, exp_avg_sq;
      for (int64_t i : units_[u].parameters) params.push_back(parameters_[i]);
      const int64_t length = UnitLength(u);
      const int64_t shard = ShardLength(length, out.world_size);
      out.unit_names.push_back(units_[u].name);
      out.unit_lengths.push_back(length);
      if (shards_) {  // the shards are the optimiser's parameters
        const torch::Tensor& s = shards_->shards()[u];
        const Optimizer::Moments m = optimizer_->MomentsOf(s);
        out.params.push_back(s.detach().clone());
        out.exp_avg.push_back(m.exp_avg.detach().clone());
        out.exp_avg_sq.push_back(m.exp_avg_sq.detach().clone());
        out.adam_step = m.step;
        continue;
      }
      for (const torch::Tensor& p : params) {
        Optimizer::Moments m = optimizer_->MomentsOf(p);
        exp_avg.push_back(m.exp_avg);
        exp_avg_sq.push_back(m.exp_avg_sq);
        out.adam_step = m.step;
      }
      auto slice = [&](const std::vector<torch::Tensor>& tensors) {
        return FlattenTensors(tensors, shard * out.world_size)
            .narrow(0, out.rank * shard, shard)
            .clone();
      };
      out.params.push_back(slice(params));
      out.exp_avg.push_back(slice(exp_avg));
      out.exp_avg_sq.push_back(slice(exp_avg_sq));
    }
  }));
  return out;
}

absl::Status LearnerStep::ImportState(const TrainerShard& full) {
  if (tensor_parallel_ != nullptr) {
    return absl::UnimplementedError(
        "importing a training state into a tensor-parallel learner (learner.tensor_parallel > 1)");
  }
  if (full.world_size != 1 || full.unit_names.size() != units_.size()) {
    return absl::InvalidArgumentError(StrCat("importing a training state of ",
                                             full.unit_names.size(), " units into a learner of ",
                                             units_.size(), " (whole units expected)"));
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    const int64_t length = UnitLength(u);
    if (full.unit_names[u] != units_[u].name || full.unit_lengths[u] != length ||
        full.params[u].numel() != length) {
      return absl::InvalidArgumentError(
          StrCat("importing a training state: unit ", u, " is ", full.unit_names[u], " of ",
                 full.unit_lengths[u], " elements, the learner's is ", units_[u].name, " of ",
                 length, " (a different model or unit layout)"));
    }
  }
  RETURN_IF_ERROR(TorchCall("importing the training state", [&] {
    torch::NoGradGuard no_grad;
    for (size_t u = 0; u < units_.size(); ++u) {
      std::vector<torch::Tensor> params;
      for (int64_t i : units_[u].parameters) params.push_back(parameters_[i]);
      if (!fully_sharded_) UnflattenInto(full.params[u], params);  // replicated
      if (shards_) {
        const int64_t shard = shards_->shard_length(u);
        const int64_t padded = shard * shards_->world_size();
        auto slice = [&](const torch::Tensor& t) {
          return FlattenTensors({&t, 1}, padded).narrow(0, shards_->rank() * shard, shard);
        };
        const torch::Tensor& s = shards_->shards()[u];
        s.detach().copy_(slice(full.params[u]));
        optimizer_->SetMoments(s,
                               {slice(full.exp_avg[u]), slice(full.exp_avg_sq[u]), full.adam_step});
        continue;
      }
      int64_t offset = 0;
      for (const torch::Tensor& p : params) {
        optimizer_->SetMoments(p,
                               {full.exp_avg[u].narrow(0, offset, p.numel()),
                                full.exp_avg_sq[u].narrow(0, offset, p.numel()), full.adam_step});
        offset += p.numel();
      }
    }
  }));
  optimizer_->RestoreCounters(full.step, full.version);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<torch::Tensor>> LearnerStep::FullParameters() {
  if (fully_sharded_) return shards_->GatherCopies(*comm_);
  if (tensor_parallel_ != nullptr) return tensor_parallel_->FullParameters();
  return TorchCallOr("copying the parameters", [&] {
    std::vector<torch::Tensor> out;
    for (const torch::Tensor& p : parameters_) out.push_back(p.detach().clone());
    return out;
  });
}

absl::Status LearnerStep::BroadcastState(int root) {
  if (shards_) {
    return absl::UnimplementedError(
        "broadcasting the training state of a sharded learner: re-shard through a checkpoint");
  }
  if (comm_ == nullptr) return absl::OkStatus();
  torch::Tensor counters;
  RETURN_IF_ERROR(TorchCall("broadcasting the training state", [&] {
    int64_t adam_step = 0;
    if (!parameters_.empty()) adam_step = optimizer_->MomentsOf(parameters_.front()).step;
    counters = torch::tensor({optimizer_->step(), optimizer_->version(), adam_step}, torch::kLong);
  }));
  RETURN_IF_ERROR(comm_->Broadcast(counters, root));
  const int64_t adam_step = counters[2].item<int64_t>();
  for (torch::Tensor& p : parameters_) {
    Optimizer::Moments m = optimizer_->MomentsOf(p);
    torch::Tensor values = p.detach();
    RETURN_IF_ERROR(comm_->Broadcast(values, root));
    RETURN_IF_ERROR(comm_->Broadcast(m.exp_avg, root));
    RETURN_IF_ERROR(comm_->Broadcast(m.exp_avg_sq, root));
    m.step = adam_step;
    RETURN_IF_ERROR(TorchCall("broadcasting the training state: moments",
                              [&] { optimizer_->SetMoments(p, m); }));
  }
  optimizer_->RestoreCounters(counters[0].item<int64_t>(), counters[1].item<int64_t>());
  return absl::OkStatus();
}

}  // namespace flywheel
