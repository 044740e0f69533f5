#include "flywheel/sim/planner.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/sim/cost_model.h"
#include "flywheel/sim/simulator.h"
#include "flywheel/sim/split_sweep.h"

namespace flywheel::sim {
namespace {

// The device counts to try: multiples of the replica size, doubling, up to max_devices (target
// mode), or max_devices alone (budget mode). Two replicas at least, so that a split exists.
std::vector<int64_t> DeviceCounts(const SimConfig& base, const PlanOptions& options,
                                  int64_t max_devices) {
  const int64_t d = base.workload.model.devices_per_replica;
  if (options.target_samples_per_s <= 0) return {max_devices};
  std::vector<int64_t> counts;
  for (int64_t n = 2 * d; n < max_devices; n *= 2) counts.push_back(n);
  counts.push_back(max_devices);
  return counts;
}

struct Shape {
  SimMode mode;
  int64_t rollout_devices = 0;  // async
  std::string name;
};

std::vector<Shape> Shapes(int64_t devices, int64_t d) {
  std::vector<Shape> shapes = {{SimMode::kColocated, 0, "colocated"}};
  for (int quarter : {1, 2, 3}) {
    const int64_t rollout = devices * quarter / 4 / d * d;
    if (rollout < d || devices - rollout < d) continue;
    bool seen = false;
    for (const Shape& s : shapes) seen |= s.mode == SimMode::kAsync && s.rollout_devices == rollout;
    if (!seen) {
      shapes.push_back({SimMode::kAsync, rollout, StrCat("async ", rollout, "/", devices)});
    }
  }
  shapes.push_back({SimMode::kElastic, 0, "elastic"});
  return shapes;
}

absl::StatusOr<PlanCandidate> Evaluate(SimConfig config, std::string label, double target) {
  ASSIGN_OR_RETURN(SimResult result, Simulate(config));
  const nlohmann::json& s = result.summary;
  PlanCandidate c;
  c.label = std::move(label);
  c.samples_per_s = s["trained_samples_per_s"].get<double>();
  c.learner_utilization = s["learner_utilization"].get<double>();
  c.device_utilisation =
      s["utilisation"]["rollout"].get<double>() + s["utilisation"]["train"].get<double>();
  c.usd_per_hour = config.cluster.devices * config.cluster.price_per_device_hour;
  c.usd_per_1k_samples = s["cost"]["usd_per_1k_trained_samples"].get<double>();
  c.meets_target = target <= 0 || c.samples_per_s >= target;
  c.config = std::move(config);
  return c;
}

// Target mode: the cheapest per hour that meets the target, ties to the faster. Budget mode:
// the fastest.
bool Better(const PlanCandidate& a, const PlanCandidate& b, bool target_mode) {
  if (target_mode && a.usd_per_hour != b.usd_per_hour) return a.usd_per_hour < b.usd_per_hour;
  return a.samples_per_s > b.samples_per_s;
}

}  // namespace

absl::Status PlanOptions::Validate() const {
  if (!(std::isfinite(target_samples_per_s) && target_samples_per_s >= 0)) {
    return absl::InvalidArgumentError("plan: --target-samples-per-s must be >= 0");
  }
  if (max_devices < 0) return absl::InvalidArgumentError("plan: --max-devices must be >= 0");
  if (steps < 1) return absl::InvalidArgumentError("plan: --steps must be >= 1");
  for (double scale : latency_scales) {
    if (!(std::isfinite(scale) && scale > 0)) {
      return absl::InvalidArgumentError("plan: latency scales must be > 0");
    }
  }
  return absl::OkStatus();
}

nlohmann::json PlanCandidate::ToJson() const {
  return {{"label", label},
          {"devices", config.cluster.devices},
          {"mode", SimModeName(config.run.mode)},
          {"rollout_devices", config.run.rollout_devices},
          {"max_staleness", config.learner.max_staleness},
          {"max_batch", config.workload.generation.max_batch},
          {"trained_samples_per_s", samples_per_s},
          {"learner_utilization", learner_utilization},
          {"device_utilisation", device_utilisation},
          {"usd_per_hour", usd_per_hour},
          {"usd_per_1k_samples", usd_per_1k_samples},
          {"meets_target", meets_target}};
}

nlohmann::json Plan::ToJson() const {
  nlohmann::json all = nlohmann::json::array();
  for (const PlanCandidate& c : candidates) all.push_back(c.ToJson());
  nlohmann::json sensitivity = nlohmann::json::array();
  for (const auto& [scale, rate] : latency_sensitivity) {
    sensitivity.push_back({{"env_latency_scale", scale}, {"trained_samples_per_s", rate}});
  }
  return {
      {"recommendation", best >= 0 ? candidates[best].ToJson() : nlohmann::json()},
      {"latency_sensitivity", sensitivity},
      {"elastic_advice", elastic_advice.has_value() ? elastic_advice->ToJson() : nlohmann::json()},
      {"candidates", all}};
}

nlohmann::json ElasticAdvice::ToJson() const {
  nlohmann::json by_load = nlohmann::json::array();
  for (const Load& l : loads) {
    by_load.push_back({{"env_latency_scale", l.latency_scale},
                       {"best_static_K", l.best_k},
                       {"best_static_seconds", l.best_seconds},
                       {"elastic_seconds", l.elastic_seconds},
                       {"fixed_split_seconds", l.fixed_seconds}});
  }
  return {{"devices", devices},
          {"max_staleness", max_staleness},
          {"loads", by_load},
          {"fixed_split_K", fixed_k},
          {"fixed_split_worst_ratio", fixed_worst},
          {"elastic_worst_ratio", elastic_worst},
          {"elastic_pays", elastic_pays},
          {"verdict", verdict}};
}

absl::StatusOr<ElasticAdvice> AdviseElastic(const SimConfig& config,
                                            const std::vector<double>& latency_scales) {
  ElasticAdvice advice;
  advice.devices = config.cluster.devices;
  advice.max_staleness = config.learner.max_staleness;
  std::vector<double> scales = {1.0};
  scales.insert(scales.end(), latency_scales.begin(), latency_scales.end());
  const int64_t replicas = config.cluster.devices / config.workload.model.devices_per_replica;
  // At most about 32 splits per load: a 1,024-device plan need not try every replica.
  const int64_t stride = std::max<int64_t>(1, replicas / 32);
  std::vector<SplitSweep> sweeps;
  for (double scale : scales) {
    SimConfig c = config;
    c.workload.env_latency.mean_ms *= scale;
    ASSIGN_OR_RETURN(SplitSweep sweep,
                     SweepSplits(c, {.colocated = false, .stride = stride, .threads = 2}));
    advice.loads.push_back({.latency_scale = scale,
                            .best_k = sweep.best_k(),
                            .best_seconds = sweep.statics[sweep.best].seconds,
                            .elastic_seconds = sweep.elastic->seconds});
    sweeps.push_back(std::move(sweep));
  }
  // The one static split a user must pick for every load: the best worst case.
  advice.fixed_worst = -1;
  for (size_t k = 0; k < sweeps.front().statics.size(); ++k) {
    double worst = 1;
    for (size_t l = 0; l < sweeps.size(); ++l) {
      worst = std::min(worst, advice.loads[l].best_seconds / sweeps[l].statics[k].seconds);
    }
    if (worst > advice.fixed_worst) {
      advice.fixed_worst = worst;
      advice.fixed_k = sweeps.front().statics[k].rollout_devices;
      for (size_t l = 0; l < sweeps.size(); ++l) {
        advice.loads[l].fixed_seconds = sweeps[l].statics[k].seconds;
      }
    }
  }
  advice.elastic_worst = 1;
  for (const ElasticAdvice::Load& l : advice.loads) {
    advice.elastic_worst = std::min(advice.elastic_worst, l.best_seconds / l.elastic_seconds);
  }
  const std::string loads = StrCat("environment latency x", Join(scales, ", x"));
  if (advice.fixed_worst >= 0.95) {
    advice.verdict =
        StrCat("a static split suffices: ", advice.fixed_k, " of ", advice.devices,
               " devices generating is within ", std::llround(100 * (1 - advice.fixed_worst)),
               " % of the best split under every load (", loads, "); elastic reaches ",
               std::llround(100 * advice.elastic_worst), " % of it");
  } else if (advice.elastic_worst > advice.fixed_worst) {
    advice.elastic_pays = true;
    advice.verdict =
        StrCat("elastic pays if the load moves this much: the best split moves with it (", loads,
               "), the best single split (", advice.fixed_k, " generating) falls to ",
               std::llround(100 * advice.fixed_worst), " % of the best, elastic stays at ",
               std::llround(100 * advice.elastic_worst), " % or more");
  } else {
    advice.verdict = StrCat("no single split fits every load (", advice.fixed_k,
                            " generating reaches ", std::llround(100 * advice.fixed_worst),
                            " % of the best), but elastic does no better here (",
                            std::llround(100 * advice.elastic_worst),
                            " %): pick the split for the load you expect most");
  }
  return advice;
}

absl::StatusOr<Plan> MakePlan(const SimConfig& base, const PlanOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  RETURN_IF_ERROR(base.Validate());
  const int64_t d = base.workload.model.devices_per_replica;
  const int64_t max_devices = options.max_devices > 0 ? options.max_devices : base.cluster.devices;
  if (max_devices < 2 * d || max_devices % d != 0) {
    return absl::InvalidArgumentError(
        StrCat("plan: the device budget ", max_devices, " must be a multiple of ",
               "workload.model.devices_per_replica = ", d, " and hold two replicas"));
  }
  const bool target_mode = options.target_samples_per_s > 0;
  Plan plan;
  for (int64_t devices : DeviceCounts(base, options, max_devices)) {
    for (const Shape& shape : Shapes(devices, d)) {
      for (int64_t eta : {0, 1, 2, 4}) {
        if (shape.mode == SimMode::kColocated && eta > 0) continue;  // on-policy by construction
        std::vector<int64_t> slots_tried;
        for (int64_t batch : {base.workload.generation.max_batch,
                              std::max<int64_t>(1, base.workload.generation.max_batch / 2)}) {
          SimConfig config = base;
          config.run.timeline = false;
          config.run.max_steps = options.steps;
          config.run.max_sim_hours = 0;
          config.cluster.devices = devices;
          config.run.mode = shape.mode;
          config.run.rollout_devices = shape.rollout_devices;
          config.learner.max_staleness = eta;
          config.workload.generation.max_batch = batch;
          if (!config.Validate().ok()) continue;  // e.g. elastic's core cells leave no satellite
          // Where KV memory, not max_batch, bounds the episodes per replica, halving max_batch
          // changes nothing: simulate each concurrency once.
          ASSIGN_OR_RETURN(CostModel cost, CostModel::Create(config.cluster, config.workload));
          if (std::find(slots_tried.begin(), slots_tried.end(), cost.episode_slots()) !=
              slots_tried.end()) {
            continue;
          }
          slots_tried.push_back(cost.episode_slots());
          ASSIGN_OR_RETURN(PlanCandidate c, Evaluate(std::move(config),
                                                     StrCat(shape.name, " on ", devices,
                                                            " eta=", eta, " batch=", batch),
                                                     options.target_samples_per_s));
          plan.candidates.push_back(std::move(c));
          const int index = static_cast<int>(plan.candidates.size()) - 1;
          if (plan.candidates[index].meets_target &&
              (plan.best < 0 ||
               Better(plan.candidates[index], plan.candidates[plan.best], target_mode))) {
            plan.best = index;
          }
        }
      }
    }
  }
  if (plan.best < 0) return plan;
  for (double scale : options.latency_scales) {
    SimConfig config = plan.candidates[plan.best].config;
    config.workload.env_latency.mean_ms *= scale;
    ASSIGN_OR_RETURN(PlanCandidate c, Evaluate(std::move(config), "", 0));
    plan.latency_sensitivity.emplace_back(scale, c.samples_per_s);
  }
  if (options.elastic_advice) {
    // On the recommendation's devices and η, with elastic's core cells leaving a satellite.
    SimConfig config = plan.candidates[plan.best].config;
    config.run.mode = SimMode::kElastic;
    // Long enough that a start from every satellite rolling out is not most of the run.
    config.run.max_steps = std::max<int64_t>(config.run.max_steps, 60);
    if (config.Validate().ok()) {
      ASSIGN_OR_RETURN(plan.elastic_advice, AdviseElastic(config, options.latency_scales));
    }
  }
  return plan;
}

absl::StatusOr<std::string> TakeLatencyFromRun(const std::filesystem::path& run_dir,
                                               SimConfig& config) {
  const std::filesystem::path path = run_dir / "summary.json";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("--from-run: cannot open ", path.string()));
  const nlohmann::json summary = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const auto* audit = summary.is_object() && summary.contains("latency_audit")
                          ? &summary["latency_audit"]
                          : nullptr;
  if (audit == nullptr || !audit->contains("env_wait_seconds") ||
      !summary.contains("episodes_finished") || summary["episodes_finished"].get<int64_t>() <= 0) {
    return absl::InvalidArgumentError(
        StrCat("--from-run: ", path.string(),
               " has no latency_audit.env_wait_seconds with episodes_finished > 0: give the "
               "summary of a finished `flywheel train` run (async or colocated)"));
  }
  const EpisodeOptions& e = config.workload.episode;
  const double turns = (e.min_turns + e.max_turns) / 2.0;
  const double episodes = summary["episodes_finished"].get<double>();
  const double per_episode_s = (*audit)["env_wait_seconds"].get<double>() / episodes;
  LatencyOptions& latency = config.workload.env_latency;
  if (latency.model == LatencyKind::kNone || latency.model == LatencyKind::kTrace) {
    latency.model = LatencyKind::kLognormal;
  }
  latency.mean_ms = 1000 * per_episode_s / turns;
  RETURN_IF_ERROR(config.Validate());
  return StrCat("environment latency from ", path.string(), ": ", per_episode_s,
                " s of environment wait per episode over ", episodes, " episodes / ", turns,
                " turns = ", latency.mean_ms, " ms per step");
}

}  // namespace flywheel::sim
