// The trainer of one cell in streaming training (QwenGyre's elastic scheduling): a replica of the
// policy that runs whichever micro-steps of a step it claims from the step's queue
// (scheduler/micro_step_queue.h), and at the step's end sums its gradient with the other
// participants' so that the update equals the one a single process computes on the same
// micro-steps, whoever ran which and whenever they joined.
//
//   core cell (rank 0)              satellite (joins after k micro-steps)
//   RunMicroStep(ms 0) … (ms k-1)   LoadWeights(core.CopyWeights(), version)
//   RunMicroStep(ms k+1) …          RunMicroStep(ms k) …        each: .grad += ∂ Σ u_t ℓ_t
//        │                               │
//        └──── FinishStep(participants' communicator, D) ────┘
//               1. Σ_participants .grad            (bucketed all-reduce, GradientReducer)
//               2. Σ_participants loss, diagnostics
//               3. core: .grad /= D; AdamW step (global-norm clip); version + 1
//               4. core → all: AgreeOk, then counters and parameters (broadcast)
//
// Several core cells (ZeRO-1 over the cores). With C core cells — ranks 0 … C−1 of every
// step's group — the parameters are split into C contiguous ranges of about equal size and core
// r holds the AdamW moments of range r only. After step 1 every participant holds the whole
// summed gradient, so each core takes the global norm over all of it (the same sum, in the same
// order, as one core would) and steps its own range; step 4 broadcasts range r from core r. The
// update equals one core's, with 1/C of the optimiser state on each core.
//
// Deferred normalisation. The step's loss is Σ_t w_t ℓ_t with w_t = u_t / D (losses.h): u_t is
// known per micro-step (1 on a trainable token for token_mean, 1/n_i for sequence_mean and
// execution_mean) but D (trainable tokens, sequences or executions of the whole step) only
// when the step's data is complete. Each micro-step backward uses u_t; FinishStep divides the
// summed gradient by D. Since Σ_t w_t ℓ_t does not depend on how the step was packed or split,
// this equals LearnerStep::Step on the whole batch (up to float summation order).
//
// A participant that ran no micro-step contributes zero gradients. A cell that dies mid-step
// never reaches FinishStep: the queue re-queues every micro-step it claimed (its gradient died
// with it) and the participants of the step are the live cells only.
//
// Only the cores' AdamW moments are used; a satellite's optimiser keeps the counters (step,
// version) it receives, so that its lr schedule is the core's. Data parallel only: sharding and
// tensor parallelism are LearnerStep's.
//
// Not thread-safe: the cell's thread owns it. CopyWeights may be called from another thread
// while this cell is inside a step and has not yet reached FinishStep's update (the weights
// change only there, after every participant has joined the reduce).
#ifndef FLYWHEEL_LEARNER_STREAMING_LEARNER_H_
#define FLYWHEEL_LEARNER_STREAMING_LEARNER_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/clock.h"
#include "flywheel/dist/communicator.h"
#include "flywheel/learner/data_parallel.h"
#include "flywheel/learner/gradient_accumulator.h"
#include "flywheel/learner/learner_options.h"
#include "flywheel/learner/micro_step.h"
#include "flywheel/learner/optimizer.h"
#include "flywheel/learner/utilisation.h"

namespace flywheel {

struct StreamingStepResult {
  OptimizerStepInfo optimizer;  // the core's step, as every participant received it
  // Σ over the participants; policy_loss, kl and entropy divided by D as the loss is.
  LossDiagnostics diagnostics;
  double loss = 0;               // Σ_t w_t ℓ_t of the step
  double normaliser = 0;         // D
  int64_t micro_steps = 0;       // run by the participants
  int64_t cell_micro_steps = 0;  // run by this cell
  int rank = 0;                  // in the participants' group; 0 is the core
  int participants = 1;
  int64_t comm_bytes = 0;  // sent by this cell during FinishStep
  PhaseTimes times;        // this cell's, since the previous FinishStep or LoadWeights
};

// The optimiser shard a cell holds: core cell `index` of `count` (its rank in every step's
// group), or none for a satellite (index −1). The default is the one core of a step.
struct OptimizerShard {
  int index = 0;
  int count = 1;

  bool core() const { return index >= 0; }
  static OptimizerShard Satellite(int cores) { return {-1, cores}; }
};

// Parameter ranges [begin, end) of `count` shards: contiguous, in parameter order, each about
// 1/count of the elements and never empty (count must not exceed the number of tensors).
std::vector<std::pair<size_t, size_t>> OptimizerShardRanges(
    std::span<const torch::Tensor> parameters, int count);

class StreamingLearner {
 public:
  // As LearnerStep: `reference` is needed only when kl_coef > 0, `temperature` is the actors'
  // sampling temperature. `shard` says which part of the optimiser this cell holds.
  StreamingLearner(const LearnerOptions& options, int64_t run_max_steps,
                   std::vector<torch::Tensor> parameters, PolicyForward policy,
                   PolicyForward reference = nullptr, double temperature = 1.0,
                   int64_t initial_version = 0, Clock* clock = RealClock(),
                   OptimizerShard shard = {});
  ~StreamingLearner();
  StreamingLearner(const StreamingLearner&) = delete;
  StreamingLearner& operator=(const StreamingLearner&) = delete;

  // Forward and backward of one micro-step into this cell's accumulated gradient. The replica
  // must hold the weights the step starts from (micro_step.version; a joining satellite loads
  // them first), else kFailedPrecondition. After an error the accumulated gradient is unusable:
  // the cell leaves the step (AbandonStep, and the queue re-queues what it claimed).
  absl::Status RunMicroStep(const MicroStep& micro_step);

  // Ends the step on every participant: `participants` is the group of the step's live cells
  // with the core cells as ranks 0 … C−1 (null when this cell is alone, which only one core
  // may be), `normaliser` the step's D. Every
  // participant calls it, whether it ran micro-steps or not. D = 0 (nothing trainable) takes no
  // step and returns kUnavailable on every participant without communicating.
  absl::StatusOr<StreamingStepResult> FinishStep(dist::Communicator* participants,
                                                 double normaliser);

  // Drops what this cell accumulated in the current step (gradients, loss, counts).
  void AbandonStep();

  // A joining satellite takes the core's weights (parameter order, same shapes) and counters.
  absl::Status LoadWeights(std::span<const torch::Tensor> weights, int64_t version,
                           int64_t optimizer_step);
  // Copies of the replica's parameters, for a satellite's LoadWeights.
  absl::StatusOr<std::vector<torch::Tensor>> CopyWeights() const;

  int64_t version() const { return optimizer_->version(); }
  int64_t optimizer_step() const { return optimizer_->step(); }
  int64_t cell_micro_steps() const { return micro_steps_; }  // in the current step
  // A core's optimiser is over its shard's parameters only.
  Optimizer& optimizer() { return *optimizer_; }
  UtilisationTracker& tracker() { return tracker_; }

 private:
  absl::Status ReduceDiagnostics(dist::Communicator* comm, StreamingStepResult& result);
  absl::Status ApplyOnCore(double normaliser, StreamingStepResult& result);
  absl::Status BroadcastUpdate(dist::Communicator& comm, StreamingStepResult& result);

  LearnerOptions options_;
  UtilisationTracker tracker_;
  GradientAccumulator accumulator_;
  std::vector<torch::Tensor> parameters_;  // the replica's (the model's tensors)
  OptimizerShard shard_;
  std::vector<std::pair<size_t, size_t>> shard_ranges_;  // of every core, by core index
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<Optimizer> optimizer_;
  absl::Status init_status_;  // a construction error, returned by RunMicroStep and FinishStep
  // This cell's share of the current step, un-normalised.
  double loss_ = 0;
  LossDiagnostics diagnostics_;
  int64_t micro_steps_ = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_STREAMING_LEARNER_H_
