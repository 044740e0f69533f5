// Training on packed trees (or flat paths, the same form): tensors for a PackedTrees batch, the
// policy's log-prob of every loss contribution, and the weighted loss.
//
// A contribution's token at (row, col) is predicted by the logits at its parent column, so
// log π is gathered at (row, parents[row][col]) — for a flat path that is simply col − 1.
#ifndef FLYWHEEL_TRAJECTORY_TREE_TRAINING_H_
#define FLYWHEEL_TRAJECTORY_TREE_TRAINING_H_

#include <functional>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "flywheel/model/attention_layout.h"
#include "flywheel/model/sampling.h"
#include "flywheel/trajectory/tree_packing.h"

namespace flywheel {

struct TreeBatchTensors {
  torch::Tensor tokens;  // [rows, length] int64
  AttentionLayout layout;  // ancestor mask, positions = depth
  // One entry per contribution:
  torch::Tensor rows;           // [C] int64
  torch::Tensor source_cols;    // [C] int64: parent column, whose logits predict the token
  torch::Tensor targets;        // [C] int64: the token
  torch::Tensor behaviour_logprobs;  // [C] float: log μ
  torch::Tensor advantages;     // [C] float
  torch::Tensor weights;        // [C] float
};

absl::StatusOr<TreeBatchTensors> ToTensors(const PackedTrees& packed);


// log π_θ of each contribution's token under `params` (the sampling distribution): [C].
torch::Tensor ContributionLogprobs(const torch::Tensor& logits, const TreeBatchTensors& batch,
                                   const SamplingParams& params);

// Per-token loss ℓ(log π, log μ, A) → [C]; e.g. PPO-clip or truncated IS.
using TokenLoss =
    std::function<torch::Tensor(const torch::Tensor& logprobs,
                                const torch::Tensor& behaviour_logprobs,
                                const torch::Tensor& advantages)>;

// Σ_c weight_c · ℓ_c.
torch::Tensor ContributionLoss(const torch::Tensor& logprobs, const TreeBatchTensors& batch,
                               const TokenLoss& loss);

}  // namespace flywheel

#endif  // FLYWHEEL_TRAJECTORY_TREE_TRAINING_H_
