// The learner step for branching agent executions trained as prefix-sharing trees:
//
//   executions ─▶ TrajectoryTree per execution ─▶ SelectPaths (role priority, J_max)
//      ─▶ advantages: executions of one group_id (one task instance) form a GRPO group,
//         A = R − mean (÷ (std + eps) with divide_by_std); R = RewardOf (partial on timeout);
//         every selected path of an execution carries its execution's advantage
//      ─▶ PackRows: a tree per group (`group`: its prompt computed once) or per execution,
//         exact or dedup weighting ─▶ one forward over the ancestor-masked rows
//      ─▶ ContributionLoss with the per-token off-policy term of learner/losses.h
//      ─▶ Optimizer::Step (version + 1)
//
// Only tokens the policy generated are trainable (tree marking), so the loss never touches
// context. Not thread-safe: the learner thread owns it.
#ifndef FLYWHEEL_LEARNER_TREE_LEARNER_H_
#define FLYWHEEL_LEARNER_TREE_LEARNER_H_

#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/learner/losses.h"
#include "flywheel/learner/optimizer.h"
#include "flywheel/model/sampling_params.h"
#include "flywheel/model/transformer.h"
#include "flywheel/trajectory/llm_call.h"
#include "flywheel/trajectory/tree_packing.h"

namespace flywheel {

struct TreeLearnerOptions {
  int j_max = 0;  // paths per execution; 0 = all
  TreeWeighting weighting = TreeWeighting::kDedup;  // with tree or group packing
  // kGroup: a GRPO group's trees as one (its prompt once); kFlat: every path its own row
  TreePacking packing = TreePacking::kGroup;
  PathAggregation aggregation = PathAggregation::kTokenMean;  // what `exact` reproduces
  bool divide_by_std = true;
  double grpo_eps = 1e-6;
  LossOptions loss;           // kind: truncated_is, ppo_clip or decoupled_ppo
  SamplingParams sampling;    // the actors' sampling: log π is evaluated under it
  int64_t row_multiple = 64;  // packed row lengths: multiples of this (PackRows)

  absl::Status Validate() const;
};

// One step's trees, selection, advantages and packed rows (exposed for tests and the bench).
struct TreeBatch {
  std::vector<std::unique_ptr<TrajectoryTree>> trees;
  std::vector<TreeTrainingItem> items;  // point into `trees`
  PackedTrees packed;
  std::vector<float> execution_advantages;  // per execution, in input order
  double reward_mean = 0;
  int64_t partial_rewards = 0;  // executions scored by their partial score
  int64_t paths = 0;            // selected paths
  int64_t tokens_flat = 0;      // tokens of the selected paths, each path on its own
  int64_t tokens_tree = 0;      // tokens of the packed trees (with flat packing: of the rows)
};

absl::StatusOr<TreeBatch> PrepareTreeBatch(const std::vector<Execution>& executions,
                                           const TreeLearnerOptions& options);

struct TreeStepResult {
  OptimizerStepInfo optimizer;
  double loss = 0;
  double mean_ratio = 1;  // mean π/μ over the contributions (1 on-policy)
  int64_t contributions = 0;
  int64_t rows = 0;
  int64_t row_length = 0;
  double reward_mean = 0;
  int64_t executions = 0, paths = 0, tokens_flat = 0, tokens_tree = 0, partial_rewards = 0;

  nlohmann::json ToJson() const;
};

class TreeLearner {
 public:
  TreeLearner(Transformer model, const TreeLearnerOptions& options,
              const OptimizerOptions& optimizer, int64_t initial_version = 0);

  absl::StatusOr<TreeStepResult> Step(const std::vector<Execution>& executions);
  // Behaviour cloning on the same trees: loss Σ weight · (−log π) over the generated tokens
  // (rewards and recorded log-probs are ignored). Warms a policy up on a scripted agent's
  // executions so that reinforcement learning starts from actions the environment accepts.
  absl::StatusOr<TreeStepResult> ImitationStep(const std::vector<Execution>& executions);

  int64_t version() const { return optimizer_.version(); }
  const Transformer& model() const { return model_; }
  // Checkpoints read and write its state.
  Optimizer& optimizer() { return optimizer_; }

 private:
  absl::StatusOr<TreeStepResult> Train(const std::vector<Execution>& executions, bool imitation);

  Transformer model_;
  const TreeLearnerOptions options_;
  Optimizer optimizer_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_TREE_LEARNER_H_
