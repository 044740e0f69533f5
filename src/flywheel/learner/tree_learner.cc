#include "flywheel/learner/tree_learner.h"

#include <map>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/learner/advantages.h"
#include "flywheel/model/placement.h"
#include "flywheel/model/torch_status.h"
#include "flywheel/trajectory/path_selection.h"
#include "flywheel/trajectory/tree_training.h"

namespace flywheel {

absl::Status TreeLearnerOptions::Validate() const {
  if (j_max < 0) return absl::InvalidArgumentError("tree learner: j_max must be >= 0 (0 = all)");
  if (loss.kind == PolicyLossKind::kVtrace) {
    return absl::InvalidArgumentError(
        "tree learner: learner.loss = vtrace needs a value head; use truncated_is, ppo_clip or "
        "decoupled_ppo");
  }
  if (loss.kl_coef > 0 || loss.entropy_coef > 0) {
    // Its loss (ContributionLoss) has no KL or entropy term: refuse rather than drop them.
    return absl::InvalidArgumentError(
        "tree learner: learner.kl_coef and learner.entropy_coef are not applied to trees; set "
        "them to 0");
  }
  if (row_multiple <= 0)
    return absl::InvalidArgumentError("tree learner: row_multiple must be > 0");
  return sampling.Validate();
}

absl::StatusOr<TreeBatch> PrepareTreeBatch(const std::vector<Execution>& executions,
                                           const TreeLearnerOptions& options) {
  if (executions.empty()) return absl::InvalidArgumentError("tree learner: no executions");
  TreeBatch batch;
  // Rewards and GRPO groups (one per group_id, an empty one a group of its own).
  std::vector<double> rewards;
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t i = 0; i < executions.size(); ++i) {
    ASSIGN_OR_RETURN(const ExecutionReward r, RewardOf(executions[i]));
    rewards.push_back(r.reward);
    batch.partial_rewards += r.from_partial_score;
    batch.reward_mean += r.reward / static_cast<double>(executions.size());
    const std::string& g = executions[i].group_id;
    groups[g.empty() ? StrCat("#", i) : g].push_back(i);
  }
  batch.execution_advantages.assign(executions.size(), 0.0f);
  std::vector<int64_t> group_of(executions.size());
  int64_t group = 0;
  for (const auto& [id, members] : groups) {
    std::vector<double> r;
    for (size_t i : members) r.push_back(rewards[i]);
    const std::vector<double> a =
        GroupNormalizedAdvantages(r, options.divide_by_std, options.grpo_eps);
    for (size_t k = 0; k < members.size(); ++k) {
      batch.execution_advantages[members[k]] = static_cast<float>(a[k]);
      group_of[members[k]] = group;
    }
    ++group;
  }
  for (size_t i = 0; i < executions.size(); ++i) {
    ASSIGN_OR_RETURN(TrajectoryTree tree, TrajectoryTree::FromExecution(executions[i]));
    batch.trees.push_back(std::make_unique<TrajectoryTree>(std::move(tree)));
    const TrajectoryTree* t = batch.trees.back().get();
    TreeTrainingItem item{t, SelectPaths(t->Paths(), options.j_max).selected, {}};
    item.advantages.assign(item.paths.size(), batch.execution_advantages[i]);
    if (options.packing == TreePacking::kGroup) item.group = group_of[i];
    for (const TreePath& p : item.paths) batch.tokens_flat += p.length;
    batch.paths += static_cast<int64_t>(item.paths.size());
    batch.items.push_back(std::move(item));
  }
  ASSIGN_OR_RETURN(batch.packed,
                   PackRows(batch.items, options.packing == TreePacking::kFlat, options.weighting,
                            options.aggregation, options.row_multiple));
  batch.tokens_tree = batch.packed.real_tokens;
  return batch;
}

nlohmann::json TreeStepResult::ToJson() const {
  return {{"loss", loss},
          {"mean_ratio", mean_ratio},
          {"contributions", contributions},
          {"rows", rows},
          {"row_length", row_length},
          {"lr", optimizer.lr},
          {"grad_norm", optimizer.grad_norm},
          {"executions", executions},
          {"paths", paths},
          {"tokens_flat", tokens_flat},
          {"tokens_tree", tokens_tree},
          {"partial_rewards", partial_rewards}};
}

TreeLearner::TreeLearner(Transformer model, const TreeLearnerOptions& options,
                         const OptimizerOptions& optimizer, int64_t initial_version)
    : model_(std::move(model)),
      options_(options),
      optimizer_(model_->parameters(), optimizer, initial_version) {}

absl::StatusOr<TreeStepResult> TreeLearner::Step(const std::vector<Execution>& executions) {
  return Train(executions, /*imitation=*/false);
}

absl::StatusOr<TreeStepResult> TreeLearner::ImitationStep(
    const std::vector<Execution>& executions) {
  return Train(executions, /*imitation=*/true);
}

absl::StatusOr<TreeStepResult> TreeLearner::Train(const std::vector<Execution>& executions,
                                                  bool imitation) {
  RETURN_IF_ERROR(options_.Validate());
  ASSIGN_OR_RETURN(const TreeBatch batch, PrepareTreeBatch(executions, options_));
  ASSIGN_OR_RETURN(TreeBatchTensors tensors, ToTensors(batch.packed));
  // Flat rows' segments are their paths, causal documents: attend to them as packed
  // trajectories train, not through the mask.
  if (options_.packing == TreePacking::kFlat) tensors.layout.documents_masked = false;
  TreeStepResult result;
  const LossOptions& lo = options_.loss;
  RETURN_IF_ERROR(TorchCall("tree learner step: forward/backward", [&] {
    optimizer_.ZeroGrad();
    torch::Tensor logits;
    {
      AutocastScope autocast(model_->parameters().front().device(), ModelDtype(model_->options()));
      logits = model_->forward(tensors.tokens, tensors.layout);
    }
    const torch::Tensor logp = ContributionLogprobs(logits, tensors, options_.sampling);
    // Decoupled PPO: one step per batch, so π_prox is this forward, detached.
    const TokenLoss term = [&lo, imitation](const torch::Tensor& lp, const torch::Tensor& mu,
                                            const torch::Tensor& adv) {
      return imitation ? -lp : PolicyTerm(lo, lp, lp.detach(), mu, adv);
    };
    const torch::Tensor loss = ContributionLoss(logp, tensors, term);
    loss.backward();
    result.loss = loss.item<double>();
    result.contributions = logp.numel();
    if (logp.numel() > 0) {
      result.mean_ratio =
          torch::exp(logp.detach() - tensors.behaviour_logprobs).mean().item<double>();
    }
  }));
  ASSIGN_OR_RETURN(result.optimizer, optimizer_.Step());
  result.rows = batch.packed.rows;
  result.row_length = batch.packed.length;
  result.reward_mean = batch.reward_mean;
  result.executions = static_cast<int64_t>(executions.size());
  result.paths = batch.paths;
  result.tokens_flat = batch.tokens_flat;
  result.tokens_tree = batch.tokens_tree;
  result.partial_rewards = batch.partial_rewards;
  return result;
}

}  // namespace flywheel
