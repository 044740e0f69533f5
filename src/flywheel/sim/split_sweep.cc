#include "flywheel/sim/split_sweep.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/sim/simulator.h"

namespace flywheel::sim {
namespace {

absl::StatusOr<SplitRun> RunOne(SimConfig config) {
  config.run.timeline = false;
  ASSIGN_OR_RETURN(SimResult result, Simulate(config));
  SplitRun run;
  run.rollout_devices = config.run.mode == SimMode::kAsync ? config.run.rollout_devices : 0;
  run.seconds = result.summary["wall_seconds"].get<double>();
  run.samples_per_s = result.summary["trained_samples_per_s"].get<double>();
  run.tokens_per_s = result.summary["trained_tokens_per_s"].get<double>();
  run.summary = std::move(result.summary);
  return run;
}

}  // namespace

nlohmann::json SplitRun::Figures() const {
  const nlohmann::json& s = summary;
  const nlohmann::json& cells = s["cells"];
  return {{"sim_hours", seconds / 3600},
          {"steps", s["steps"]},
          {"trained_samples_per_s", samples_per_s},
          {"trained_tokens_per_s", tokens_per_s},
          {"learner_utilization", s["learner_utilization"]},
          {"utilisation", s["utilisation"]},
          {"episodes_handed_over", s["episodes_handed_over"]},
          {"dropped_work", s["dropped_work"]},
          {"switches_per_step", cells["switches_per_step"]},
          {"usd", s["cost"]["usd"]}};
}

double SplitSweep::ElasticSwitchesPerStep() const {
  return elastic->summary["cells"]["switches_per_step"].get<double>();
}

nlohmann::json SplitSweep::ToJson() const {
  nlohmann::json splits = nlohmann::json::object();
  for (const SplitRun& run : statics) splits[StrCat(run.rollout_devices)] = run.Figures();
  nlohmann::json j = {{"static", splits},
                      {"best_static_K", best_k()},
                      {"half_split_K", statics[half].rollout_devices}};
  if (elastic.has_value()) {
    j["elastic"] = elastic->Figures();
    j["elastic_vs_best_static"] = ElasticVsBest();
    j["elastic_vs_half_split"] = ElasticVsHalf();
  }
  if (colocated.has_value()) {
    j["colocated"] = colocated->Figures();
    j["colocated_max_staleness"] = 0;
    if (elastic.has_value()) j["elastic_vs_colocated"] = ElasticVsColocated();
  }
  return j;
}

absl::StatusOr<SplitSweep> SweepSplits(const SimConfig& config, const SweepOptions& options) {
  RETURN_IF_ERROR(config.Validate());
  const int64_t d = config.workload.model.devices_per_replica;
  const int64_t devices = config.cluster.devices;
  if (options.stride < 1 || options.threads < 1) {
    return absl::InvalidArgumentError("split sweep: stride and threads must be >= 1");
  }
  std::vector<SimConfig> runs;
  for (int64_t k = d; k <= devices - d; k += options.stride * d) {
    SimConfig c = config;
    c.run.mode = SimMode::kAsync;
    c.run.rollout_devices = k;
    runs.push_back(std::move(c));
  }
  const size_t static_runs = runs.size();
  if (options.elastic) {
    SimConfig c = config;
    c.run.mode = SimMode::kElastic;
    runs.push_back(std::move(c));
  }
  if (options.colocated) {
    SimConfig c = config;
    c.run.mode = SimMode::kColocated;
    c.learner.max_staleness = 0;  // what colocated is: each batch trained by its own weights
    runs.push_back(std::move(c));
  }
  std::vector<absl::StatusOr<SplitRun>> results(runs.size(), absl::UnknownError("not run"));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < runs.size(); i = next++) results[i] = RunOne(runs[i]);
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < options.threads; ++t) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();

  SplitSweep sweep;
  for (size_t i = 0; i < results.size(); ++i) {
    RETURN_IF_ERROR(Annotate(
        results[i].status(),
        StrCat("split sweep: ", SimModeName(runs[i].run.mode),
               runs[i].run.mode == SimMode::kAsync ? StrCat(" K=", runs[i].run.rollout_devices)
                                                   : "")));
    if (i < static_runs) {
      sweep.statics.push_back(*std::move(results[i]));
    } else if (runs[i].run.mode == SimMode::kElastic) {
      sweep.elastic = *std::move(results[i]);
    } else {
      sweep.colocated = *std::move(results[i]);
    }
  }
  if (sweep.statics.empty()) {
    return absl::InvalidArgumentError(
        StrCat("split sweep: ", devices, " devices in replicas of ", d, " leave no static split"));
  }
  const int64_t half = std::max(d, devices / 2 / d * d);
  for (size_t i = 0; i < sweep.statics.size(); ++i) {
    const SplitRun& run = sweep.statics[i];
    if (sweep.best < 0 || run.seconds < sweep.statics[sweep.best].seconds) {
      sweep.best = static_cast<int>(i);
    }
    if (sweep.half < 0 || std::abs(run.rollout_devices - half) <
                              std::abs(sweep.statics[sweep.half].rollout_devices - half)) {
      sweep.half = static_cast<int>(i);
    }
  }
  return sweep;
}

}  // namespace flywheel::sim
