// The hardware of the cluster simulator, replaced by arithmetic: how long a prefill, a decode
// step, a training micro-step, a weight transfer and a role switch take on the configured
// devices, and what the episodes of the workload look like. Rooflines (Williams et al., 2009):
// a kernel takes max(FLOPs / peak FLOP/s, bytes / peak bandwidth), each peak scaled by the share
// of it the engine reaches. Symbols (docs/simulator.md has the derivations):
//
//   P  model parameters            W = P · bytes_per_param      weight bytes
//   d  devices per replica (cell)  F, B, M, I per device: FLOP/s, HBM bytes/s, HBM bytes,
//   κ  KV bytes per token             interconnect bytes/s
//
//   prefill(n, p)       = (2·P·n + 2·L·h·n·(2p + n)) / (d·F·prefill_mfu)   compute-bound: the
//                         weights' FLOPs, and causal attention of n new tokens over p already
//                         cached (QKᵀ and AV, 2·h·(n·p + n²/2) each per layer; L layers, h hidden)
//   decode_step(b, C)   = o_d + max(2·P·b / (d·F·prefill_mfu), (W + κ·C) / (d·B·bw_eff))
//                         b sequences in the batch, C tokens of KV cache read in all, o_d the
//                         engine's fixed cost per step (launches, sampling; 0 by default)
//   slots               = min(max_batch, ⌊(d·M − W) / (κ · max_tokens)⌋)   KV memory per replica
//   kv budget           = (d·M − W) / κ   tokens of KV cache a replica holds in all
//   train(T tokens, n)  = 6·P·T / (n·d·F·mfu)                              (Kaplan et al., 2020)
//   step                = o_s                the optimiser step and the step's fixed work
//   transfer            = W / (d·I)                                        every link carries W/d
//   allreduce(n)        = 2·(n−1)/n · W / (d·I)                             ring all-reduce
//   to_train            = switch_overhead_s + transfer    a satellite pulls the current weights
//   to_rollout          = switch_overhead_s               its weights are already current
//
// Attention's FLOPs count in prefill (where they are quadratic: a handed-over 700K-token context
// prefilled again), not in decode, which is bound by reading the KV cache (counted in bytes).
// Immutable after Create; thread-compatible.
#ifndef FLYWHEEL_SIM_COST_MODEL_H_
#define FLYWHEEL_SIM_COST_MODEL_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/core/clock.h"
#include "flywheel/core/config.h"
#include "flywheel/env/env_options.h"
#include "flywheel/env/latency/latency_model.h"

namespace flywheel::sim {

// [cluster]: identical devices. Defaults: one H100 SXM node.
struct ClusterOptions {
  int64_t devices = 8;
  double bf16_flops = 989e12;            // dense bf16 FLOP/s per device
  double memory_bytes = 80e9;            // HBM per device
  double memory_bandwidth = 3.35e12;     // HBM bytes/s per device
  double interconnect_bandwidth = 50e9;  // bytes/s per device between replicas (weights, grads)
  double price_per_device_hour = 2.5;    // USD

  template <typename V>
  void VisitFields(V& v) {
    v.Field("devices", devices, "accelerators in the cluster");
    v.Field("bf16_flops", bf16_flops, "dense bf16 FLOP/s per device");
    v.Field("memory_bytes", memory_bytes, "accelerator memory per device, bytes");
    v.Field("memory_bandwidth", memory_bandwidth, "memory bandwidth per device, bytes/s");
    v.Field("interconnect_bandwidth", interconnect_bandwidth,
            "bandwidth per device between replicas (weight transfer, gradients), bytes/s");
    v.Field("price_per_device_hour", price_per_device_hour, "price of one device for one hour");
  }
  absl::Status Validate() const;
};

// [workload.model]: the figures, or a Hugging Face config.json that gives them (hf_model_config.h).
struct ModelCostOptions {
  std::string hf_config;  // read by LoadSimConfig, which fills the keys below and clears it
  double params = 7e9;
  int64_t layers = 32;
  int64_t hidden = 4096;
  double kv_bytes_per_token = 0;  // 0: 2 (K, V) · layers · hidden · 2 bytes (bf16, no GQA)
  double bytes_per_param = 2;     // bf16 weights
  int64_t devices_per_replica = 1;

  template <typename V>
  void VisitFields(V& v) {
    v.Field("hf_config", hf_config,
            "Hugging Face config.json (path relative to this file) giving params, layers, hidden, "
            "kv_bytes_per_token and bytes_per_param; \"\" = those keys");
    v.Field("params", params, "model parameters");
    v.Field("layers", layers, "transformer layers");
    v.Field("hidden", hidden, "hidden size");
    v.Field("kv_bytes_per_token", kv_bytes_per_token,
            "KV-cache bytes per token; 0 = 2 x layers x hidden x 2 (bf16, no grouped-query)");
    v.Field("bytes_per_param", bytes_per_param, "bytes per weight (2 = bf16)");
    v.Field("devices_per_replica", devices_per_replica,
            "devices one model replica (a cell) spans: tensor x pipeline parallel degree");
  }
};

// [workload.generation]
struct GenerationCostOptions {
  int64_t max_batch = 256;   // continuous-batching cap per replica
  double prefill_mfu = 0.5;  // share of peak FLOP/s that prefill (and decode compute) reach
  double bandwidth_efficiency = 0.8;  // share of peak memory bandwidth that decode reaches
  // Fixed seconds of every decode step whatever its batch: kernel launches, sampling, the
  // engine's scheduling. Negligible for a large model on an accelerator; what dominates a small
  // one on a CPU (`flywheel sim calibrate` measures it).
  double decode_step_overhead_s = 0;

  template <typename V>
  void VisitFields(V& v) {
    v.Field("max_batch", max_batch, "sequences one replica decodes at once, at most");
    v.Field("prefill_mfu", prefill_mfu, "share of peak FLOP/s reached by prefill");
    v.Field("bandwidth_efficiency", bandwidth_efficiency,
            "share of peak memory bandwidth reached by a decode step");
    v.Field("decode_step_overhead_s", decode_step_overhead_s,
            "fixed seconds of every decode step on top of the roofline (launches, sampling)");
  }
};

// [workload.training]
struct TrainingCostOptions {
  double mfu = 0.4;                // model-FLOP utilisation of a training micro-step
  double switch_overhead_s = 3.0;  // fixed part of a role switch: engine / optimiser set-up
  double step_overhead_s = 0;      // per learner step: optimiser update, advantages, packing

  template <typename V>
  void VisitFields(V& v) {
    v.Field("mfu", mfu, "model-FLOP utilisation of training (6 x params FLOPs per token)");
    v.Field("switch_overhead_s", switch_overhead_s,
            "fixed seconds of a role switch on top of moving weights");
    v.Field("step_overhead_s", step_overhead_s,
            "fixed seconds of every learner step after its micro-steps (optimiser update)");
  }
};

enum class LengthKind { kFixed, kUniform, kLognormal, kTrace };
inline constexpr config::ChoiceName<LengthKind> kLengthKindNames[] = {
    {"fixed", LengthKind::kFixed},
    {"uniform", LengthKind::kUniform},
    {"lognormal", LengthKind::kLognormal},
    {"trace", LengthKind::kTrace}};

// [workload.episode]: one agent execution. Its length (prompt, generated and observation tokens)
// is drawn per episode; turns alternate generation and an environment step. With length =
// "trace" an episode is one of the recorded ones (the trace_* arrays, one entry per episode, as
// `flywheel sim calibrate` records them from the policy), drawn uniformly.
struct EpisodeOptions {
  int64_t min_turns = 4;
  int64_t max_turns = 4;  // turns drawn uniformly in [min_turns, max_turns]
  int64_t prompt_tokens = 512;
  LengthKind length = LengthKind::kFixed;
  double mean_tokens = 4096;        // whole trajectory: prompt + generated + observations
  int64_t min_tokens = 1024;        // uniform: the range; lognormal: the clamp
  int64_t max_tokens = 8192;        // also the KV reservation of one episode
  double length_sigma = 0.5;        // lognormal: standard deviation of log(length)
  double generated_fraction = 0.5;  // share of the non-prompt tokens the policy generates
  double failure_rate = 0;          // probability that an episode fails and is restarted
  // A load that moves: episodes started in phase i (the phases of workload.env_latency:
  // phase_seconds, cycled) are length_phase_scales[i mod n] times as long, clamped to
  // [min_tokens, max_tokens]; and every learner step makes them (1 + length_growth_per_step)
  // times longer than the last, as a policy that learns to work longer.
  std::vector<double> length_phase_scales;
  double length_growth_per_step = 0;
  // The environment also answers the last turn (a final score, a test run) before the episode
  // ends, as a job's environment does; false: the last generation ends the episode.
  bool final_env_step = false;
  // The environment's reset, which gives the prompt, takes a step's latency too before the first
  // turn (a sandbox starting, a repository cloned), as a job's latency wrapper charges it.
  bool reset_env_step = false;
  // length = "trace": recorded episodes, index by index.
  std::vector<int64_t> trace_turns;
  std::vector<int64_t> trace_prompt_tokens;
  std::vector<int64_t> trace_generated_tokens;    // all turns together
  std::vector<int64_t> trace_observation_tokens;  // all observations together

  template <typename V>
  void VisitFields(V& v) {
    v.Field("min_turns", min_turns, "turns per episode, at least");
    v.Field("max_turns", max_turns, "turns per episode, at most (uniform in between)");
    v.Field("prompt_tokens", prompt_tokens, "prompt tokens of an episode");
    v.Choice("length", length, kLengthKindNames, "distribution of the trajectory length");
    v.Field("mean_tokens", mean_tokens, "fixed, lognormal: mean trajectory length in tokens");
    v.Field("min_tokens", min_tokens, "uniform: shortest; lognormal: clamp below");
    v.Field("max_tokens", max_tokens,
            "uniform: longest; lognormal: clamp above; the KV memory reserved per episode");
    v.Field("length_sigma", length_sigma, "lognormal: standard deviation of log(length)");
    v.Field("generated_fraction", generated_fraction,
            "share of the non-prompt tokens the policy generates (the rest: observations)");
    v.Field("failure_rate", failure_rate,
            "probability that an episode fails at a random turn and is started again");
    v.Field("length_phase_scales", length_phase_scales,
            "with workload.env_latency.phase_seconds: the length factor of each phase's episodes");
    v.Field("length_growth_per_step", length_growth_per_step,
            "episodes grow by this fraction per learner step (0 = steady lengths)");
    v.Field("final_env_step", final_env_step,
            "the environment answers the last turn too (a final score) before the episode ends");
    v.Field("reset_env_step", reset_env_step,
            "the environment's reset takes a step's latency before the first turn");
    v.Field("trace_turns", trace_turns, "trace: turns of each recorded episode");
    v.Field("trace_prompt_tokens", trace_prompt_tokens, "trace: prompt tokens of each");
    v.Field("trace_generated_tokens", trace_generated_tokens,
            "trace: tokens the policy generated in each, all turns");
    v.Field("trace_observation_tokens", trace_observation_tokens,
            "trace: observation tokens of each, all turns");
  }
};

// [workload]
struct WorkloadOptions {
  ModelCostOptions model;
  GenerationCostOptions generation;
  TrainingCostOptions training;
  EpisodeOptions episode;
  LatencyOptions env_latency;  // per environment step: the project's latency models

  template <typename V>
  void VisitFields(V& v) {
    v.Section("model", model);
    v.Section("generation", generation);
    v.Section("training", training);
    v.Section("episode", episode);
    v.Section("env_latency", env_latency);
  }
  absl::Status Validate() const;

 private:
  absl::Status ValidateTrace(const EpisodeOptions& e) const;
};

// One drawn episode. Every turn generates `generated_per_turn` tokens and then waits for the
// environment, whose observation adds `observation_per_turn` tokens (none after the last turn).
struct EpisodeShape {
  int turns = 1;
  int64_t prompt_tokens = 0;
  int64_t generated_per_turn = 0;
  int64_t observation_per_turn = 0;

  int64_t generated_tokens() const { return generated_per_turn * turns; }
  int64_t total_tokens() const {
    return prompt_tokens + generated_tokens() + observation_per_turn * (turns - 1);
  }
};

class CostModel {
 public:
  // Validates both sections, and that one episode's KV reservation fits a replica. The
  // environment's latency phases are timed on `clock` (borrowed; the simulator's virtual clock).
  static absl::StatusOr<CostModel> Create(const ClusterOptions& cluster,
                                          const WorkloadOptions& workload,
                                          Clock* clock = RealClock());

  double weight_bytes() const { return weight_bytes_; }
  double kv_bytes_per_token() const { return kv_bytes_per_token_; }
  int64_t devices_per_replica() const { return workload_.model.devices_per_replica; }
  int64_t replicas() const { return cluster_.devices / devices_per_replica(); }
  // Concurrent episodes one replica holds (KV memory, the batch cap).
  int64_t episode_slots() const { return episode_slots_; }
  // Tokens of KV cache one replica holds in all, after its weights.
  double kv_budget_tokens() const { return kv_budget_tokens_; }

  // Prefilling `tokens` new tokens after `past` tokens already in the KV cache.
  double PrefillSeconds(int64_t tokens, int64_t past = 0) const;
  // One decode step of `batch` sequences reading `kv_tokens` tokens of KV cache in all.
  double DecodeStepSeconds(int64_t batch, double kv_tokens) const;
  // Training on `tokens` tokens (forward and backward) by `replicas` replicas together.
  double TrainSeconds(double tokens, int64_t replicas = 1) const;
  // The fixed part of a learner step after its micro-steps (the optimiser update).
  double StepOverheadSeconds() const { return workload_.training.step_overhead_s; }
  double WeightTransferSeconds() const;
  double AllReduceSeconds(int64_t participants) const;
  double SwitchToTrainSeconds() const;
  double SwitchToRolloutSeconds() const;
  // Price of `device_seconds` of device time.
  double CostUsd(double device_seconds) const;

  // One episode; its drawn length times `length_scale` (phases, growth), clamped to the range.
  EpisodeShape DrawEpisode(std::mt19937_64& rng, double length_scale = 1) const;
  // The length factor of episodes started `seconds` into the run after `steps` learner steps.
  double LengthScale(double seconds, int64_t steps) const;
  // The environment's step latency, seeded: the project's latency models (env/latency/).
  std::unique_ptr<LatencyModel> NewEnvLatency(uint64_t seed) const;

  const ClusterOptions& cluster() const { return cluster_; }
  const WorkloadOptions& workload() const { return workload_; }
  std::string DebugString() const;

 private:
  CostModel(const ClusterOptions& cluster, const WorkloadOptions& workload,
            std::shared_ptr<const LatencyModelFactory> latency);

  ClusterOptions cluster_;
  WorkloadOptions workload_;
  std::shared_ptr<const LatencyModelFactory> latency_;
  double weight_bytes_ = 0;
  double kv_bytes_per_token_ = 0;
  int64_t episode_slots_ = 0;
  double kv_budget_tokens_ = 0;
};

}  // namespace flywheel::sim

#endif  // FLYWHEEL_SIM_COST_MODEL_H_
