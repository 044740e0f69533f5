// The learner's optimiser step: AdamW with a warm-up + cosine learning rate, global gradient-norm
// clipping, and the policy version, which increases by exactly one per optimiser step. Takes the
// parameters of any torch::nn::Module; knows nothing about the model.
//
//   opt.ZeroGrad();
//   for (micro-batch) loss(mb).backward();      // gradient accumulation
//   ASSIGN_OR_RETURN(OptimizerStepInfo info, opt.Step());   // lr, clip, AdamW, version + 1
//
// Not thread-safe: the learner thread owns it.
#ifndef FLYWHEEL_LEARNER_OPTIMIZER_H_
#define FLYWHEEL_LEARNER_OPTIMIZER_H_

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/learner/learner_options.h"
#include "flywheel/learner/lr_schedule.h"

namespace flywheel {

struct OptimizerOptions {
  LrSchedule schedule;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0 = off

  // total_steps = 0 in the config means "the run's max_steps".
  static OptimizerOptions FromLearnerOptions(const LearnerOptions& o, int64_t run_max_steps);
};

struct OptimizerStepInfo {
  int64_t step = 0;     // optimiser steps taken, after this one
  int64_t version = 0;  // policy version of the parameters after this step
  double lr = 0;
  double grad_norm = 0;  // global L2 norm before clipping
  bool clipped = false;
};

class Optimizer {
 public:
  Optimizer(std::vector<torch::Tensor> parameters, OptimizerOptions options,
            int64_t initial_version = 0);

  void ZeroGrad();
  // Applies the schedule's rate for this step, clips, takes the AdamW step and increments step
  // and version. A non-finite gradient norm is an error and the parameters are left untouched
  // (the gradients are zeroed), so one bad batch cannot poison the weights.
  absl::StatusOr<OptimizerStepInfo> Step();

  int64_t step() const { return step_; }
  int64_t version() const { return version_; }
  double current_lr() const { return options_.schedule.At(step_); }
  // The schedule's peak rate from the next step on (warm-up and decay keep their steps), e.g.
  // for a supervised phase before reinforcement learning on the same optimiser.
  void set_peak_lr(double lr) { options_.schedule.lr = lr; }

  // Sharded training (learner/sharding.h): the optimiser holds only this rank's slice of the
  // gradients, so the global norm needs the other ranks' sums of squares. The reducer gets the
  // local Σ g² and returns the global one (an all-reduce); unset = the local sum is global.
  using SquareSumReducer = std::function<absl::StatusOr<double>(double local_sum_sq)>;
  void SetSquareSumReducer(SquareSumReducer reducer) { square_sum_reducer_ = std::move(reducer); }

  // AdamW moments of one of this optimiser's parameters (zeros and step 0 before its first
  // step), for flat, re-shardable checkpoints (learner/sharded_checkpoint.h).
  struct Moments {
    torch::Tensor exp_avg;
    torch::Tensor exp_avg_sq;
    int64_t step = 0;
  };
  Moments MomentsOf(const torch::Tensor& parameter) const;
  // Bytes of optimiser state held for `parameter` (0 before its first step).
  int64_t StateBytes(const torch::Tensor& parameter) const;
  void SetMoments(const torch::Tensor& parameter, Moments moments);
  void RestoreCounters(int64_t step, int64_t version) {
    step_ = step;
    version_ = version;
  }
  const std::vector<torch::Tensor>& parameters() const { return parameters_; }

  // Optimiser state (AdamW moments and step counts) plus step and version.
  absl::Status Save(torch::serialize::OutputArchive& archive) const;
  absl::Status Load(torch::serialize::InputArchive& archive);

  std::string DebugString() const;

 private:
  std::vector<torch::Tensor> parameters_;
  OptimizerOptions options_;
  std::unique_ptr<torch::optim::AdamW> adamw_;
  SquareSumReducer square_sum_reducer_;  // null: this optimiser sees the whole gradient
  int64_t step_ = 0;
  int64_t version_ = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_OPTIMIZER_H_
