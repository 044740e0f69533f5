#include "flywheel/sim/cost_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel::sim {
namespace {

bool Positive(double x) { return std::isfinite(x) && x > 0; }

absl::Status NeedPositive(double x, std::string_view key) {
  if (Positive(x)) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat(key, " must be a finite number > 0 (got ", x, ")"));
}

absl::Status NeedNonNegative(double x, std::string_view key) {
  if (std::isfinite(x) && x >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat(key, " must be a finite number >= 0 (got ", x, ")"));
}

absl::Status ValidateLoadChanges(const EpisodeOptions& e, const LatencyOptions& latency) {
  if (!e.length_phase_scales.empty() && !(latency.phase_seconds > 0)) {
    return absl::InvalidArgumentError(
        "workload.episode.length_phase_scales follows the phases of workload.env_latency: set "
        "workload.env_latency.phase_seconds > 0 (and phase_scales, [1.0] for lengths alone)");
  }
  for (double scale : e.length_phase_scales) {
    if (!(std::isfinite(scale) && scale > 0)) {
      return absl::InvalidArgumentError(StrCat(
          "workload.episode.length_phase_scales must be factors > 0, got ", scale));
    }
  }
  if (!(std::isfinite(e.length_growth_per_step) && e.length_growth_per_step > -1)) {
    return absl::InvalidArgumentError(
        StrCat("workload.episode.length_growth_per_step must be > -1, got ",
               e.length_growth_per_step));
  }
  return absl::OkStatus();
}

absl::Status ValidateFailureRate(const EpisodeOptions& e) {
  if (e.failure_rate >= 0 && e.failure_rate < 1) return absl::OkStatus();
  return absl::InvalidArgumentError("workload.episode.failure_rate must be in [0, 1)");
}

absl::Status NeedShare(double x, std::string_view key) {
  if (std::isfinite(x) && x > 0 && x <= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat(key, " must be in (0, 1] (got ", x, ")"));
}

}  // namespace

absl::Status ClusterOptions::Validate() const {
  if (devices < 1) {
    return absl::InvalidArgumentError(StrCat("cluster.devices must be >= 1 (got ", devices, ")"));
  }
  RETURN_IF_ERROR(NeedPositive(bf16_flops, "cluster.bf16_flops"));
  RETURN_IF_ERROR(NeedPositive(memory_bytes, "cluster.memory_bytes"));
  RETURN_IF_ERROR(NeedPositive(memory_bandwidth, "cluster.memory_bandwidth"));
  RETURN_IF_ERROR(NeedPositive(interconnect_bandwidth, "cluster.interconnect_bandwidth"));
  if (!(std::isfinite(price_per_device_hour) && price_per_device_hour >= 0)) {
    return absl::InvalidArgumentError("cluster.price_per_device_hour must be >= 0");
  }
  return absl::OkStatus();
}

absl::Status WorkloadOptions::Validate() const {
  if (!model.hf_config.empty()) {
    // LoadSimConfig resolves it against the config file's directory; code that builds a
    // SimConfig itself calls ApplyHfConfig.
    return absl::InvalidArgumentError(
        StrCat("workload.model.hf_config = \"", model.hf_config,
               "\" was not read: call ApplyHfConfig (hf_model_config.h) before validating"));
  }
  RETURN_IF_ERROR(NeedPositive(model.params, "workload.model.params"));
  if (model.layers < 1 || model.hidden < 1 || model.devices_per_replica < 1) {
    return absl::InvalidArgumentError(
        "workload.model.layers, .hidden and .devices_per_replica must be >= 1");
  }
  if (!(std::isfinite(model.kv_bytes_per_token) && model.kv_bytes_per_token >= 0)) {
    return absl::InvalidArgumentError(
        "workload.model.kv_bytes_per_token must be >= 0 (0: derived)");
  }
  RETURN_IF_ERROR(NeedPositive(model.bytes_per_param, "workload.model.bytes_per_param"));
  if (generation.max_batch < 1) {
    return absl::InvalidArgumentError("workload.generation.max_batch must be >= 1");
  }
  RETURN_IF_ERROR(NeedShare(generation.prefill_mfu, "workload.generation.prefill_mfu"));
  RETURN_IF_ERROR(
      NeedShare(generation.bandwidth_efficiency, "workload.generation.bandwidth_efficiency"));
  RETURN_IF_ERROR(NeedShare(training.mfu, "workload.training.mfu"));
  RETURN_IF_ERROR(NeedNonNegative(training.switch_overhead_s, "workload.training.switch_overhead_s"));
  RETURN_IF_ERROR(NeedNonNegative(training.step_overhead_s, "workload.training.step_overhead_s"));
  RETURN_IF_ERROR(NeedNonNegative(generation.decode_step_overhead_s,
                                  "workload.generation.decode_step_overhead_s"));
  const EpisodeOptions& e = episode;
  if (e.length == LengthKind::kTrace) return ValidateTrace(e);
  if (e.min_turns < 1 || e.max_turns < e.min_turns) {
    return absl::InvalidArgumentError(
        StrCat("workload.episode: need 1 <= min_turns <= max_turns (got ", e.min_turns, ", ",
               e.max_turns, ")"));
  }
  if (e.prompt_tokens < 1 || e.min_tokens <= e.prompt_tokens || e.max_tokens < e.min_tokens) {
    return absl::InvalidArgumentError(
        StrCat("workload.episode: need 1 <= prompt_tokens < min_tokens <= max_tokens (got ",
               e.prompt_tokens, ", ", e.min_tokens, ", ", e.max_tokens, ")"));
  }
  if (e.length != LengthKind::kUniform &&
      !(e.mean_tokens >= e.min_tokens && e.mean_tokens <= e.max_tokens)) {
    return absl::InvalidArgumentError(
        StrCat("workload.episode.mean_tokens must be in [min_tokens, max_tokens] = [", e.min_tokens,
               ", ", e.max_tokens, "] (got ", e.mean_tokens, ")"));
  }
  if (!(e.length_sigma >= 0 && e.length_sigma < 5)) {
    return absl::InvalidArgumentError("workload.episode.length_sigma must be in [0, 5)");
  }
  RETURN_IF_ERROR(NeedShare(e.generated_fraction, "workload.episode.generated_fraction"));
  RETURN_IF_ERROR(ValidateFailureRate(e));
  RETURN_IF_ERROR(ValidateLoadChanges(e, env_latency));
  return env_latency.Validate("workload.env_latency");
}

absl::Status WorkloadOptions::ValidateTrace(const EpisodeOptions& e) const {
  const size_t n = e.trace_turns.size();
  if (n == 0 || e.trace_prompt_tokens.size() != n || e.trace_generated_tokens.size() != n ||
      e.trace_observation_tokens.size() != n) {
    return absl::InvalidArgumentError(StrCat(
        "workload.episode.length = \"trace\" needs trace_turns, trace_prompt_tokens, "
        "trace_generated_tokens and trace_observation_tokens of one equal length >= 1 (got ",
        n, ", ", e.trace_prompt_tokens.size(), ", ", e.trace_generated_tokens.size(), ", ",
        e.trace_observation_tokens.size(), ")"));
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t total = e.trace_prompt_tokens[i] + e.trace_generated_tokens[i] +
                          e.trace_observation_tokens[i];
    if (e.trace_turns[i] < 1 || e.trace_prompt_tokens[i] < 1 || e.trace_generated_tokens[i] < 1 ||
        e.trace_observation_tokens[i] < 0 || total > e.max_tokens) {
      return absl::InvalidArgumentError(StrCat(
          "workload.episode trace entry ", i, ": need turns >= 1, prompt >= 1, generated >= 1, ",
          "observations >= 0 and a total <= max_tokens = ", e.max_tokens, " (got ",
          e.trace_turns[i], ", ", e.trace_prompt_tokens[i], ", ", e.trace_generated_tokens[i],
          ", ", e.trace_observation_tokens[i], ")"));
    }
  }
  RETURN_IF_ERROR(ValidateFailureRate(e));
  return env_latency.Validate("workload.env_latency");
}

absl::StatusOr<CostModel> CostModel::Create(const ClusterOptions& cluster,
                                            const WorkloadOptions& workload, Clock* clock) {
  RETURN_IF_ERROR(cluster.Validate());
  RETURN_IF_ERROR(workload.Validate());
  const int64_t d = workload.model.devices_per_replica;
  if (cluster.devices % d != 0) {
    return absl::InvalidArgumentError(
        StrCat("cluster.devices = ", cluster.devices, " is not a multiple of ",
               "workload.model.devices_per_replica = ", d, ": every replica spans d devices"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const LatencyModelFactory> latency,
                   LatencyModelFactory::Create(workload.env_latency, clock));
  CostModel model(cluster, workload, std::move(latency));
  // One episode reserves KV for its longest possible trajectory; weights take their share first.
  const double free_bytes = d * cluster.memory_bytes - model.weight_bytes_;
  const double per_episode = model.kv_bytes_per_token_ * workload.episode.max_tokens;
  const double fit = std::floor(free_bytes / per_episode);
  if (!(fit >= 1)) {
    return absl::InvalidArgumentError(
        StrCat("one episode of workload.episode.max_tokens = ", workload.episode.max_tokens,
               " tokens needs ", per_episode / 1e9, " GB of KV cache, and a replica of ", d,
               " device(s) has ", free_bytes / 1e9,
               " GB left after the weights: raise workload.model.devices_per_replica"));
  }
  model.episode_slots_ = static_cast<int64_t>(std::min<double>(fit, workload.generation.max_batch));
  model.kv_budget_tokens_ = free_bytes / model.kv_bytes_per_token_;
  return model;
}

CostModel::CostModel(const ClusterOptions& cluster, const WorkloadOptions& workload,
                     std::shared_ptr<const LatencyModelFactory> latency)
    : cluster_(cluster), workload_(workload), latency_(std::move(latency)) {
  const ModelCostOptions& m = workload_.model;
  weight_bytes_ = m.params * m.bytes_per_param;
  kv_bytes_per_token_ = m.kv_bytes_per_token > 0
                            ? m.kv_bytes_per_token
                            : 2.0 * static_cast<double>(m.layers) * m.hidden * 2.0;
}

double CostModel::PrefillSeconds(int64_t tokens, int64_t past) const {
  const double n = static_cast<double>(tokens);
  const double attention = 2.0 * static_cast<double>(workload_.model.layers) *
                           static_cast<double>(workload_.model.hidden) * n *
                           (2.0 * static_cast<double>(past) + n);
  const double flops = 2.0 * workload_.model.params * n + attention;
  return flops / (devices_per_replica() * cluster_.bf16_flops * workload_.generation.prefill_mfu);
}

double CostModel::DecodeStepSeconds(int64_t batch, double kv_tokens) const {
  const double d = static_cast<double>(devices_per_replica());
  const double compute = 2.0 * workload_.model.params * static_cast<double>(batch) /
                         (d * cluster_.bf16_flops * workload_.generation.prefill_mfu);
  const double memory = (weight_bytes_ + kv_bytes_per_token_ * kv_tokens) /
                        (d * cluster_.memory_bandwidth * workload_.generation.bandwidth_efficiency);
  return workload_.generation.decode_step_overhead_s + std::max(compute, memory);
}

double CostModel::TrainSeconds(double tokens, int64_t replicas) const {
  const double devices = static_cast<double>(replicas * devices_per_replica());
  return 6.0 * workload_.model.params * tokens /
         (devices * cluster_.bf16_flops * workload_.training.mfu);
}

double CostModel::WeightTransferSeconds() const {
  return weight_bytes_ / (devices_per_replica() * cluster_.interconnect_bandwidth);
}

double CostModel::AllReduceSeconds(int64_t participants) const {
  if (participants <= 1) return 0;
  const double n = static_cast<double>(participants);
  return 2.0 * (n - 1) / n * WeightTransferSeconds();
}

double CostModel::SwitchToTrainSeconds() const {
  return workload_.training.switch_overhead_s + WeightTransferSeconds();
}

double CostModel::SwitchToRolloutSeconds() const { return workload_.training.switch_overhead_s; }

double CostModel::CostUsd(double device_seconds) const {
  return device_seconds / 3600.0 * cluster_.price_per_device_hour;
}

double CostModel::LengthScale(double seconds, int64_t steps) const {
  const EpisodeOptions& e = workload_.episode;
  double scale = std::pow(1 + e.length_growth_per_step, static_cast<double>(steps));
  const double phase_seconds = workload_.env_latency.phase_seconds;
  if (!e.length_phase_scales.empty() && phase_seconds > 0) {
    const auto phase = static_cast<size_t>(std::max(0.0, seconds) / phase_seconds);
    scale *= e.length_phase_scales[phase % e.length_phase_scales.size()];
  }
  return scale;
}

EpisodeShape CostModel::DrawEpisode(std::mt19937_64& rng, double length_scale) const {
  const EpisodeOptions& e = workload_.episode;
  EpisodeShape shape;
  if (e.length == LengthKind::kTrace) {
    const size_t i = std::uniform_int_distribution<size_t>(0, e.trace_turns.size() - 1)(rng);
    shape.turns = static_cast<int>(e.trace_turns[i]);
    shape.prompt_tokens = e.trace_prompt_tokens[i];
    shape.generated_per_turn =
        std::max<int64_t>(1, std::llround(static_cast<double>(e.trace_generated_tokens[i]) /
                                          static_cast<double>(shape.turns)));
    shape.observation_per_turn =
        shape.turns > 1 ? std::llround(static_cast<double>(e.trace_observation_tokens[i]) /
                                       static_cast<double>(shape.turns - 1))
                        : 0;
    return shape;
  }
  shape.turns =
      static_cast<int>(std::uniform_int_distribution<int64_t>(e.min_turns, e.max_turns)(rng));
  double length = e.mean_tokens;
  if (e.length == LengthKind::kUniform) {
    length = std::uniform_real_distribution<double>(static_cast<double>(e.min_tokens),
                                                    static_cast<double>(e.max_tokens))(rng);
  } else if (e.length == LengthKind::kLognormal) {
    // E[X] = exp(mu + sigma²/2): mu = log(mean) − sigma²/2, as the latency models do.
    const double mu = std::log(e.mean_tokens) - e.length_sigma * e.length_sigma / 2;
    length = std::lognormal_distribution<double>(mu, e.length_sigma)(rng);
  }
  length = std::clamp(length * length_scale, static_cast<double>(e.min_tokens),
                      static_cast<double>(e.max_tokens));
  shape.prompt_tokens = e.prompt_tokens;
  const double rest = length - static_cast<double>(e.prompt_tokens);
  shape.generated_per_turn =
      std::max<int64_t>(1, std::llround(rest * e.generated_fraction / shape.turns));
  shape.observation_per_turn =
      shape.turns > 1 ? std::llround(rest * (1 - e.generated_fraction) / (shape.turns - 1)) : 0;
  return shape;
}

std::unique_ptr<LatencyModel> CostModel::NewEnvLatency(uint64_t seed) const {
  return latency_->NewModel(seed);
}

std::string CostModel::DebugString() const {
  return StrCat("CostModel(", cluster_.devices, " devices in ", replicas(), " replicas of ",
                devices_per_replica(), ", weights ", weight_bytes_ / 1e9, " GB, KV ",
                kv_bytes_per_token_, " B/token, ", episode_slots_,
                " episodes per replica, transfer ", WeightTransferSeconds(), " s, ",
                latency_->DebugString(), ")");
}

}  // namespace flywheel::sim
