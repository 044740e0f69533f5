// The learner's knobs: the [learner] section of a job config. Header-only and torch-free, so the
// runtime can bind and validate a config without linking LibTorch. The components of the learner
// (advantages, losses, packer, optimiser, checkpoints) read their parts of this one struct.
#ifndef FLYWHEEL_LEARNER_LEARNER_OPTIONS_H_
#define FLYWHEEL_LEARNER_LEARNER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/core/config.h"
#include "flywheel/core/strings.h"

namespace flywheel {

// Which per-token policy loss the learner minimises (formulas in docs/algorithms.md).
enum class PolicyLossKind { kTruncatedIs, kPpoClip, kDecoupledPpo, kVtrace };
inline constexpr config::ChoiceName<PolicyLossKind> kPolicyLossKindNames[] = {
    {"truncated_is", PolicyLossKind::kTruncatedIs},
    {"ppo_clip", PolicyLossKind::kPpoClip},
    {"decoupled_ppo", PolicyLossKind::kDecoupledPpo},
    {"vtrace", PolicyLossKind::kVtrace}};

// How per-token losses become one scalar. Only trainable tokens count.
//   token_mean:     Σ ℓ / (trainable tokens in the step)
//   sequence_mean:  mean over sequences of (mean over the sequence's trainable tokens)
//   execution_mean: mean over executions of (mean over the execution's trainable tokens)
enum class LossAggregation { kTokenMean, kSequenceMean, kExecutionMean };
inline constexpr config::ChoiceName<LossAggregation> kLossAggregationNames[] = {
    {"token_mean", LossAggregation::kTokenMean},
    {"sequence_mean", LossAggregation::kSequenceMean},
    {"execution_mean", LossAggregation::kExecutionMean}};

// How advantages are computed from rewards.
//   grpo:          (R − mean_group R) / (std_group R + eps), one value per trajectory
//   grpo_no_std:   R − mean_group R (no std division)
//   turn_return:   per-turn discounted return G_turn minus the group mean of G_0
//   turn_grpo:     per-turn discounted return G_j normalised like GRPO against the group's
//                  returns at the same turn j (dense per-turn credit)
//   vtrace:        V-trace policy advantages from a value head (needs model values)
enum class AdvantageKind { kGrpo, kGrpoNoStd, kTurnReturn, kTurnGrpo, kVtrace };
inline constexpr config::ChoiceName<AdvantageKind> kAdvantageKindNames[] = {
    {"grpo", AdvantageKind::kGrpo},
    {"grpo_no_std", AdvantageKind::kGrpoNoStd},
    {"turn_return", AdvantageKind::kTurnReturn},
    {"turn_grpo", AdvantageKind::kTurnGrpo},
    {"vtrace", AdvantageKind::kVtrace}};

// What the packer does with a trajectory longer than the largest bucket.
enum class TooLongPolicy { kError, kDrop };
inline constexpr config::ChoiceName<TooLongPolicy> kTooLongPolicyNames[] = {
    {"error", TooLongPolicy::kError}, {"drop", TooLongPolicy::kDrop}};

// How the learner's ranks split the training state (ZeRO, Rajbhandari et al. 2020).
//   none:            data parallel; every rank holds all parameters, gradients, optimiser state
//   grads_optimizer: ZeRO-2; parameters replicated, gradients and AdamW moments sharded
//   full:            ZeRO-3 / FSDP; parameters sharded too, gathered per layer for compute
enum class ShardingMode { kNone, kGradsOptimizer, kFull };
inline constexpr config::ChoiceName<ShardingMode> kShardingModeNames[] = {
    {"none", ShardingMode::kNone},
    {"grads_optimizer", ShardingMode::kGradsOptimizer},
    {"full", ShardingMode::kFull}};

struct LearnerOptions {
  // Loss.
  PolicyLossKind loss = PolicyLossKind::kDecoupledPpo;
  double clip_eps = 0.2;      // PPO ratio clip: [1 − clip_eps, 1 + clip_eps]
  double is_cap = 2.0;        // truncated-IS cap c (also the decoupled-PPO behaviour cap)
  double entropy_coef = 0.0;  // entropy bonus
  double kl_coef = 0.0;       // k3 KL to a frozen reference model; 0 = no reference
  LossAggregation aggregation = LossAggregation::kTokenMean;
  double value_coef = 0.5;  // weight of the value loss when a value head is used

  // Advantages.
  AdvantageKind advantage = AdvantageKind::kGrpo;
  double gamma = 1.0;                 // discount over turns (turn_return) / tokens (vtrace)
  double grpo_eps = 1e-6;             // std epsilon in the GRPO denominator
  double timeout_reward_scale = 1.0;  // a timed-out episode earns scale · partial_score
  double vtrace_rho_bar = 1.0;        // ρ̄
  double vtrace_c_bar = 1.0;          // c̄
  double vtrace_lambda = 1.0;         // λ in c_t = λ · min(c̄, π/μ)

  // Staleness: lag = learner_version − min token version; -1 = unbounded.
  int64_t max_staleness = 4;

  // Packing.
  std::vector<int64_t> buckets = {256, 512, 1024};  // row lengths L, ascending
  int64_t token_budget = 8192;  // tokens per micro-batch (rows = token_budget / L)
  TooLongPolicy too_long = TooLongPolicy::kError;
  bool carry_over = false;  // hold part-filled last micro-batch rows for the next step

  // Optimiser and schedule.
  double lr = 1e-5;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double adam_eps = 1e-8;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;    // cosine decay horizon; 0 = run.max_steps
  double min_lr_ratio = 0.1;  // the cosine ends at lr · min_lr_ratio
  double grad_clip = 1.0;     // global gradient-norm clip; 0 = off

  // Checkpoints and publishing.
  int64_t checkpoint_every = 100;  // steps; 0 = never
  int64_t keep_last = 3;
  int64_t publish_every = 1;  // steps between weight snapshots to actors

  // Data-parallel / sharded training over a process group (learner/data_parallel.h).
  // Learner ranks the job starts; a LearnerStep takes the size of the group it is given.
  int64_t world_size = 1;
  ShardingMode sharding = ShardingMode::kNone;
  double grad_bucket_mb = 25.0;  // gradient all-reduce bucket size (PyTorch DDP's default)
  // Tensor-parallel ranks per data-parallel replica (learner/tensor_parallel.h): world_size =
  // DP x tensor_parallel; each decoder layer is split over tensor_parallel ranks.
  int64_t tensor_parallel = 1;

  template <typename V>
  void VisitFields(V& v) {
    v.Choice("loss", loss, kPolicyLossKindNames, "policy loss");
    v.Field("clip_eps", clip_eps, "PPO ratio clip epsilon");
    v.Field("is_cap", is_cap, "cap c on the importance weight π/μ (truncated IS, decoupled PPO)");
    v.Field("entropy_coef", entropy_coef, "entropy bonus coefficient");
    v.Field("kl_coef", kl_coef, "k3 KL-to-reference coefficient; 0 = no reference model");
    v.Choice("aggregation", aggregation, kLossAggregationNames, "loss aggregation");
    v.Field("value_coef", value_coef, "value loss weight (value head only)");
    v.Choice("advantage", advantage, kAdvantageKindNames, "advantage estimator");
    v.Field("gamma", gamma, "discount factor");
    v.Field("grpo_eps", grpo_eps, "epsilon added to the group std");
    v.Field("timeout_reward_scale", timeout_reward_scale,
            "reward of a timed-out episode = scale * partial_score");
    v.Field("vtrace_rho_bar", vtrace_rho_bar, "V-trace rho-bar");
    v.Field("vtrace_c_bar", vtrace_c_bar, "V-trace c-bar");
    v.Field("vtrace_lambda", vtrace_lambda, "V-trace lambda");
    v.Field("max_staleness", max_staleness, "drop trajectories whose lag exceeds this; -1 = off");
    v.Field("buckets", buckets, "packed row lengths, ascending");
    v.Field("token_budget", token_budget, "tokens per micro-batch (rows * L)");
    v.Choice("too_long", too_long, kTooLongPolicyNames,
             "trajectory longer than the largest bucket: error or drop (counted)");
    v.Field("carry_over", carry_over,
            "hold rows that would part-fill a step's last micro-batch for the next step "
            "(less padding, at most one step more lag)");
    v.Field("lr", lr, "peak AdamW learning rate");
    v.Field("weight_decay", weight_decay, "AdamW decoupled weight decay");
    v.Field("beta1", beta1, "AdamW beta1");
    v.Field("beta2", beta2, "AdamW beta2");
    v.Field("adam_eps", adam_eps, "AdamW epsilon");
    v.Field("warmup_steps", warmup_steps, "linear warm-up steps");
    v.Field("total_steps", total_steps, "cosine decay horizon; 0 = run.max_steps");
    v.Field("min_lr_ratio", min_lr_ratio, "final learning rate as a fraction of lr");
    v.Field("grad_clip", grad_clip, "global gradient-norm clip; 0 = off");
    v.Field("checkpoint_every", checkpoint_every, "steps between checkpoints; 0 = never");
    v.Field("keep_last", keep_last, "complete checkpoints kept");
    v.Field("publish_every", publish_every, "steps between weight snapshots to actors");
    v.Field("world_size", world_size, "learner ranks (data parallel); 1 = one process");
    v.Choice("sharding", sharding, kShardingModeNames,
             "state split over ranks: none (data parallel), grads_optimizer (ZeRO-2), "
             "full (ZeRO-3)");
    v.Field("grad_bucket_mb", grad_bucket_mb,
            "MiB of gradients per all-reduce bucket, launched while backward still runs");
    v.Field("tensor_parallel", tensor_parallel,
            "ranks each decoder layer is split over (Megatron-style heads / MLP width); "
            "world_size = data-parallel replicas x tensor_parallel");
  }

  absl::Status Validate() const {
    auto error = [](std::string message) {
      return absl::InvalidArgumentError(StrCat("learner.", message));
    };
    if (!(clip_eps > 0 && clip_eps < 1))
      return error(StrCat("clip_eps (", clip_eps, ") must be in (0, 1)"));
    if (!(is_cap >= 1)) return error(StrCat("is_cap (", is_cap, ") must be >= 1"));
    if (entropy_coef < 0 || kl_coef < 0 || value_coef < 0) {
      return error("entropy_coef, kl_coef and value_coef must be >= 0");
    }
    if (!(gamma > 0 && gamma <= 1)) return error(StrCat("gamma (", gamma, ") must be in (0, 1]"));
    if (!(grpo_eps > 0)) return error("grpo_eps must be > 0");
    if (!(vtrace_rho_bar > 0 && vtrace_c_bar > 0 && vtrace_lambda > 0 && vtrace_lambda <= 1)) {
      return error("vtrace_rho_bar and vtrace_c_bar must be > 0, vtrace_lambda in (0, 1]");
    }
    if ((loss == PolicyLossKind::kVtrace) != (advantage == AdvantageKind::kVtrace)) {
      return error(
          "loss = \"vtrace\" and advantage = \"vtrace\" go together (both need the value head)");
    }
    if (max_staleness < -1) return error("max_staleness must be >= 0, or -1 for no bound");
    if (buckets.empty()) return error("buckets must list at least one row length");
    for (size_t i = 0; i < buckets.size(); ++i) {
      if (buckets[i] <= 0) return error(StrCat("buckets[", i, "] must be > 0"));
      if (i > 0 && buckets[i] <= buckets[i - 1]) {
        return error(StrCat("buckets must be strictly ascending (buckets[", i, "] = ", buckets[i],
                            " after ", buckets[i - 1], ")"));
      }
    }
    if (token_budget < buckets.back()) {
      return error(StrCat("token_budget (", token_budget,
                          ") must hold at least one row of the largest bucket (", buckets.back(),
                          ")"));
    }
    if (!(lr > 0)) return error("lr must be > 0");
    if (weight_decay < 0) return error("weight_decay must be >= 0");
    if (!(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1)) {
      return error("beta1 and beta2 must be in [0, 1)");
    }
    if (!(adam_eps > 0)) return error("adam_eps must be > 0");
    if (warmup_steps < 0 || total_steps < 0) {
      return error("warmup_steps and total_steps must be >= 0");
    }
    if (total_steps > 0 && warmup_steps > total_steps) {
      return error(
          StrCat("warmup_steps (", warmup_steps, ") exceeds total_steps (", total_steps, ")"));
    }
    if (!(min_lr_ratio >= 0 && min_lr_ratio <= 1)) return error("min_lr_ratio must be in [0, 1]");
    if (grad_clip < 0) return error("grad_clip must be >= 0 (0 = off)");
    if (checkpoint_every < 0) return error("checkpoint_every must be >= 0 (0 = never)");
    if (keep_last < 1) return error("keep_last must be >= 1");
    if (publish_every < 1) return error("publish_every must be >= 1");
    if (world_size < 1) return error(StrCat("world_size (", world_size, ") must be >= 1"));
    if (!(grad_bucket_mb > 0)) {
      return error(StrCat("grad_bucket_mb (", grad_bucket_mb, ") must be > 0"));
    }
    if (tensor_parallel < 1) {
      return error(StrCat("tensor_parallel (", tensor_parallel, ") must be >= 1"));
    }
    if (world_size % tensor_parallel != 0) {
      return error(StrCat("tensor_parallel (", tensor_parallel,
                          ") must divide learner.world_size (", world_size,
                          "): world_size = data-parallel replicas x tensor_parallel"));
    }
    if (tensor_parallel > 1 && sharding != ShardingMode::kNone) {
      return error(StrCat("tensor_parallel (", tensor_parallel,
                          ") > 1 works with learner.sharding = \"none\" only (data parallel "
                          "over the replicas)"));
    }
    return absl::OkStatus();
  }
};

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_LEARNER_OPTIONS_H_
