// One learner optimiser step over a batch of trajectories, model-agnostic: the model enters as a
// function from a packed micro-batch to logits. It composes the staleness filter, advantages,
// the packer (with carry-over), the loss with gradient accumulation over micro-batches, the
// optimiser, and utilisation accounting:
//
//   batch ─▶ StalenessFilter ─▶ ComputeAdvantages ─▶ Packer ─▶ for each micro-batch:
//            GradientAccumulator: logits = policy(mb); log π = TokenLogprobs(…); loss.backward()
//        ─▶ Optimizer::Step (version + 1) ─▶ StepResult (diagnostics, lags, waste, times)
//
// The proximal policy of decoupled PPO is "the weights at the start of the step". One optimiser
// step is taken per batch, so those are exactly the weights of this forward pass: log π_prox is
// the detached log π of the same forward, and no second forward pass is needed.
//
// Data parallel / sharded (learner.world_size > 1; data_parallel.h, sharding.h,
// fully_sharded.h): every rank of a process group constructs a LearnerStep with a
// ParallelContext and calls Step with the SAME global batch. Each rank runs its share of the
// micro-batches; gradients are summed over the ranks (all-reduced in buckets during the last
// backward, or reduce-scattered into flat shards with learner.sharding = "grads_optimizer" or
// "full"), so every rank ends the step with the weights (or its shard of the weights) that
// single-process training on the global batch would have:
//
//   rank r:  same batch ─▶ same Packer output ─▶ AssignMicroBatches[r] ─▶ fwd/bwd ×k
//            ─▶ Σ_ranks gradients ─▶ Optimizer (global norm clip) ─▶ same weights on all ranks
//
// Tensor parallel (learner.tensor_parallel = T > 1; tensor_parallel.h): the ranks form a DP x TP
// mesh. `parameters` and `policy` are those of this rank's TensorParallelModel (ParallelContext
// .tensor_parallel), `communicator` is the DP group: the T ranks of a replica run the same
// micro-batches, the f/g all-reduces inside the layers keep their activations equal, gradients
// are summed over the DP group and clipped by the global norm (TP slices summed over the TP
// group, replicated parameters once). FullParameters() all-gathers the slices. T = 1 changes
// nothing.
//
// A rank that fails a micro-batch leaves its peers waiting in the next collective until the
// communicator's timeout; they then fail too (no rank steps with a partial gradient). The
// group's collectives are then out of step: continue on a new group (SetCommunicator).
//
// Not thread-safe: the learner thread owns it. Waiting for data happens outside; report it with
// tracker().Add(Phase::kWaitData, …) before Step.
#ifndef FLYWHEEL_LEARNER_LEARNER_STEP_H_
#define FLYWHEEL_LEARNER_LEARNER_STEP_H_

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/clock.h"
#include "flywheel/core/trajectory.h"
#include "flywheel/dist/communicator.h"
#include "flywheel/learner/data_parallel.h"
#include "flywheel/learner/fully_sharded.h"
#include "flywheel/learner/gradient_accumulator.h"
#include "flywheel/learner/learner_options.h"
#include "flywheel/learner/losses.h"
#include "flywheel/learner/optimizer.h"
#include "flywheel/learner/packer.h"
#include "flywheel/learner/sharding.h"
#include "flywheel/learner/staleness.h"
#include "flywheel/learner/tensor_parallel.h"
#include "flywheel/learner/utilisation.h"

namespace flywheel {

struct LearnerStepResult {
  OptimizerStepInfo optimizer;
  LossDiagnostics diagnostics;
  StalenessReport staleness;
  double loss = 0;  // Σ of the micro-batch losses = the aggregated step loss
  int64_t bucket = 0;
  int64_t micro_batches = 0;
  double padding_waste = 0;
  int64_t held_back = 0;  // trajectories carried to the next step
  int64_t dropped_too_long = 0;
  PhaseTimes times;

  // Data parallel / sharded. micro_batches above is the global count.
  int rank = 0;
  int world_size = 1;
  int64_t rank_micro_batches = 0;  // run by this rank, including zero-weight padding
  int64_t comm_bytes = 0;          // sent by this rank through collectives during the step
  CommStats comm;                  // the bucketed gradient all-reduce (data parallel)
  // Tensor parallel: this rank's place in its TP group (rank / world_size above are the DP
  // group's).
  int tp_rank = 0;
  int tensor_parallel = 1;
  // Bytes this rank holds at the end of the step, measured from the tensors: parameters,
  // gradients (full or shards) and optimiser state (AdamW moments).
  int64_t param_bytes = 0;
  int64_t grad_bytes = 0;
  int64_t optimizer_bytes = 0;

  nlohmann::json ToJson() const;
};

// What one Step did with each trajectory it was given, by id (also when it returned an error:
// kUnavailable leaves `trained` holding what was packed but had no trainable token). The remote
// learner's lease protocol acknowledges these and records them (consumed.jsonl).
struct BatchDisposition {
  std::vector<std::string> trained;    // in this step's micro-batches (carried ones included)
  std::vector<std::string> stale;      // dropped: lag above learner.max_staleness
  std::vector<std::string> too_long;   // dropped: longer than the largest bucket
  std::vector<std::string> held_back;  // carried to the next step (learner.carry_over)
};

// How a LearnerStep takes part in a process group.
struct ParallelContext {
  // Borrowed: must outlive the LearnerStep, or the next SetCommunicator. Null = one process.
  dist::Communicator* communicator = nullptr;
  // Flat units for sharding and sharded checkpoints (indices into `parameters`); empty = all
  // parameters in one unit. TransformerUnits gives one unit per decoder layer.
  std::vector<ShardUnit> units;
  // sharding = "full" only: the model whose decoder layers are gathered one at a time (borrowed;
  // `parameters` must be its parameters, `units` its TransformerUnits). Between steps its
  // parameters hold no storage: read the weights with FullParameters().
  TransformerImpl* transformer = nullptr;
  // learner.tensor_parallel > 1 only: this rank's slice of the model and its TP group (borrowed;
  // `parameters` must be its parameters(), the policy its model()). `communicator` is then the
  // DP group of the mesh (DeviceMesh), or null with one replica.
  TensorParallelModel* tensor_parallel = nullptr;
};

class LearnerStep {
 public:
  // `reference` computes the frozen reference model's logits; needed only when kl_coef > 0.
  // `temperature` is the actors' sampling temperature (log π must be evaluated under it).
  LearnerStep(const LearnerOptions& options, int64_t run_max_steps,
              std::vector<torch::Tensor> parameters, PolicyForward policy,
              PolicyForward reference = nullptr, double temperature = 1.0,
              Clock* clock = RealClock(), int64_t initial_version = 0,
              ParallelContext parallel = {});
  ~LearnerStep();

  // Trains on `batch`. An empty batch after filtering takes no optimiser step and is an
  // error (kUnavailable) so the caller fetches more data.
  absl::StatusOr<LearnerStepResult> Step(std::vector<Trajectory> batch);

  // Joins another group between two steps (membership change): the ranks of the new group
  // must hold the same training state (data parallel replicates it; a new member copies it,
  // e.g. from a checkpoint or a broadcast). With sharding the group size cannot change here:
  // re-shard through a sharded checkpoint instead.
  absl::Status SetCommunicator(dist::Communicator* communicator);

  // Data parallel: copies rank `root`'s training state (parameters, AdamW moments, counters) to
  // every rank of the current group, e.g. to a member that just joined. Every rank calls it.
  absl::Status BroadcastState(int root);

  // This rank's slices of the flat training state (parameters, AdamW moments, counters) for a
  // sharded checkpoint, in any sharding mode.
  absl::StatusOr<TrainerShard> ExportShard();
  // Installs whole units (a world_size-1 TrainerShard, as ReadShardedCheckpoint assembles
  // them): parameters and moments, this rank's slice of them when sharded, and the counters.
  absl::Status ImportState(const TrainerShard& full);

  // Copies of the whole parameters (parameter order). Fully sharded, they are gathered from the
  // shards; tensor parallel, from the TP group's slices (the unsliced model, full shapes): every
  // rank calls it (e.g. to publish a weight snapshot).
  absl::StatusOr<std::vector<torch::Tensor>> FullParameters();

  // Installs the frozen reference model of the KL term, e.g. once the warm start has made the
  // policy the one reinforcement learning starts from.
  void SetReference(PolicyForward reference) { accumulator_.set_reference(std::move(reference)); }

  // What the last Step did with each trajectory.
  const BatchDisposition& last_disposition() const { return disposition_; }

  // The optimiser: over the parameters, or over this rank's flat shards when sharded.
  Optimizer& optimizer() { return *optimizer_; }
  UtilisationTracker& tracker() { return tracker_; }
  int64_t version() const { return optimizer_->version(); }
  const std::vector<ShardUnit>& units() const { return units_; }
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int world_size() const { return comm_ ? comm_->size() : 1; }

 private:
  absl::Status AccumulateMicroBatch(const PackedMicroBatch& mb, LearnerStepResult& result);
  absl::Status ReduceGradients(LearnerStepResult& result);
  absl::Status BuildShards();
  absl::Status SetUpTensorParallel();
  void ClearGradients();
  void MeasureHeldBytes(LearnerStepResult& result) const;
  int64_t UnitLength(size_t u) const;

  LearnerOptions options_;
  LossOptions loss_options_;
  AdvantageKind advantage_kind_;
  GradientAccumulator accumulator_;  // forward, loss, backward of one micro-batch
  StalenessFilter staleness_;
  Packer packer_;
  std::vector<torch::Tensor> parameters_;  // the model's
  std::vector<ShardUnit> units_;
  int64_t run_max_steps_;
  int64_t initial_version_;
  dist::Communicator* comm_ = nullptr;                 // borrowed (ParallelContext)
  std::unique_ptr<GradientReducer> reducer_;           // data parallel with a communicator
  std::unique_ptr<FlatShards> shards_;                 // sharding = grads_optimizer or full
  TransformerImpl* transformer_ = nullptr;             // borrowed (ParallelContext), full only
  std::unique_ptr<FullyShardedLayers> fully_sharded_;  // sharding = full
  TensorParallelModel* tensor_parallel_ = nullptr;     // borrowed (ParallelContext), TP > 1
  std::unique_ptr<Optimizer> optimizer_;  // over parameters_, or over shards_->shards()
  absl::Status init_status_;              // a construction error, returned by Step
  UtilisationTracker tracker_;
  // Carried over from the previous step (carry_over), with their advantages.
  std::vector<Trajectory> held_;
  std::vector<std::vector<float>> held_advantages_;
  BatchDisposition disposition_;  // of the last Step
};

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_LEARNER_STEP_H_
