// The [tree] section of a job config: `flywheel train` with tree.enabled runs the tree job
// (runtime/tree_job.h) instead of the turn-by-turn actor pipeline — the repair agent harness
// (retries, summaries, sub-agents) driven by the policy being trained, its executions trained
// as prefix-sharing trees. The task is env.repair, sampling is [sampling], the loss, optimiser
// and publishing come from [learner], steps and seed from [run]. No torch: the config layer
// includes it.
#ifndef FLYWHEEL_RUNTIME_TREE_JOB_OPTIONS_H_
#define FLYWHEEL_RUNTIME_TREE_JOB_OPTIONS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "flywheel/core/config.h"
#include "flywheel/trajectory/tree_packing.h"

namespace flywheel {

inline constexpr config::ChoiceName<TreeWeighting> kTreeWeightingNames[] = {
    {"exact", TreeWeighting::kExact}, {"dedup", TreeWeighting::kDedup}};
inline constexpr config::ChoiceName<TreePacking> kTreePackingNames[] = {
    {"group", TreePacking::kGroup}, {"tree", TreePacking::kTree}, {"flat", TreePacking::kFlat}};

inline std::string_view PackingName(TreePacking packing) {
  for (const auto& n : kTreePackingNames) {
    if (n.value == packing) return n.name;
  }
  return "?";
}

struct TreeJobOptions {
  bool enabled = false;
  int64_t instances_per_step = 2;       // repair instances per learner step
  int64_t executions_per_instance = 4;  // the GRPO group of each instance
  int64_t j_max = 0;                    // paths per execution; 0 = all
  TreeWeighting weighting = TreeWeighting::kDedup;
  TreePacking packing = TreePacking::kGroup;
  bool divide_by_std = true;
  int64_t max_new_tokens = 12;
  int64_t max_retries = 3;
  int64_t max_subagents = 3;
  int64_t summarize_after_tokens = 160;
  int64_t max_attempt_turns = 0;
  // Behaviour cloning of the scripted harness agent before reinforcement learning, so that the
  // policy starts from actions the environment accepts (an untrained model's actions are
  // almost all "invalid", every execution of an instance scores the same, and GRPO's
  // advantages are all zero).
  int64_t imitation_steps = 0;
  double imitation_noise = 0.2;  // the scripted agent's probability of a random patch
  double imitation_give_up = 0;  // its probability of submitting instead of starting an attempt
  // Imitation's learning rate; 0 = learner.lr. Cloning takes a rate that would collapse the
  // policy in reinforcement learning.
  double imitation_lr = 0;

  template <typename V>
  void VisitFields(V& v) {
    v.Field("enabled", enabled,
            "flywheel train runs the repair harness tree job instead of the actor pipeline");
    v.Field("instances_per_step", instances_per_step, "repair instances per learner step");
    v.Field("executions_per_instance", executions_per_instance,
            "executions of each instance: one GRPO group");
    v.Field("j_max", j_max, "paths trained per execution, by role priority; 0 = all");
    v.Choice("weighting", weighting, kTreeWeightingNames,
             "exact = the gradient of training every path; dedup = each shared token once");
    v.Choice("packing", packing, kTreePackingNames,
             "group = the executions of an instance one prefix-sharing tree (the prompt once); "
             "tree = one tree per execution; flat = every path its own causal document (the "
             "baseline; the gradient of weighting = \"exact\")");
    v.Field("divide_by_std", divide_by_std, "GRPO: divide by the group's reward std");
    v.Field("max_new_tokens", max_new_tokens, "tokens per LLM call of the harness");
    v.Field("max_retries", max_retries, "retries from the checkpoint after a failed test run");
    v.Field("max_subagents", max_subagents, "sub-agents per execution, one per failing test");
    v.Field("summarize_after_tokens", summarize_after_tokens,
            "main context length that triggers a summary call");
    v.Field("max_attempt_turns", max_attempt_turns,
            "main calls per attempt before the harness tests; 0 = 2 * num_bugs + 2");
    v.Field("imitation_steps", imitation_steps,
            "learner steps imitating the scripted harness agent before reinforcement learning");
    v.Field("imitation_noise", imitation_noise,
            "probability that the imitated agent's patch is a random one");
    v.Field("imitation_give_up", imitation_give_up,
            "probability that the imitated agent submits instead of starting an attempt");
    v.Field("imitation_lr", imitation_lr,
            "learning rate of the imitation steps (the schedule of learner.lr, scaled); 0 = "
            "learner.lr");
  }
  absl::Status Validate() const {
    if (!enabled) return absl::OkStatus();
    if (instances_per_step < 1 || executions_per_instance < 1) {
      return absl::InvalidArgumentError(
          "tree.instances_per_step and tree.executions_per_instance must be >= 1");
    }
    if (j_max < 0) return absl::InvalidArgumentError("tree.j_max must be >= 0 (0 = all)");
    if (max_new_tokens < 1) return absl::InvalidArgumentError("tree.max_new_tokens must be >= 1");
    if (max_retries < 0 || max_subagents < 0 || max_attempt_turns < 0) {
      return absl::InvalidArgumentError(
          "tree.max_retries, tree.max_subagents and tree.max_attempt_turns must be >= 0");
    }
    if (imitation_steps < 0 || !(imitation_noise >= 0 && imitation_noise <= 1) ||
        !(imitation_give_up >= 0 && imitation_give_up <= 1) || imitation_lr < 0) {
      return absl::InvalidArgumentError(
          "tree.imitation_steps and tree.imitation_lr must be >= 0, tree.imitation_noise and "
          "tree.imitation_give_up in [0, 1]");
    }
    if (summarize_after_tokens < 16) {
      return absl::InvalidArgumentError("tree.summarize_after_tokens must be >= 16");
    }
    return absl::OkStatus();
  }
};

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_TREE_JOB_OPTIONS_H_
