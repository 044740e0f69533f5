// flywheel plan CONFIG.toml [--target-samples-per-s X] [--max-devices N] [--steps N]
//                           [--from-run runs/NAME] [--out FILE.json] [--set k=v …]: sizing by
//                           simulation (docs/planning.md).
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/cli/command.h"
#include "flywheel/sim/planner.h"

namespace flywheel::cli {
namespace {

void PrintCandidate(const sim::PlanCandidate& c) {
  std::cout << fmt::format(
      "  {:<34} {:>9.3f} samples/s  learner {:>5.3f}  devices busy {:>5.3f}  "
      "${:>8.2f}/h  ${:>7.3f}/1k samples\n",
      c.label, c.samples_per_s, c.learner_utilization, c.device_utilisation, c.usd_per_hour,
      c.usd_per_1k_samples);
}

int Run(const std::string& file, const std::vector<std::string>& overrides,
        const sim::PlanOptions& options, const std::string& from_run, const std::string& out) {
  absl::StatusOr<sim::SimConfig> config = sim::LoadSimConfig(file, overrides);
  if (!config.ok()) return ReportError(config.status());
  if (!from_run.empty()) {
    absl::StatusOr<std::string> note = sim::TakeLatencyFromRun(from_run, *config);
    if (!note.ok()) return ReportError(note.status());
    std::cout << *note << "\n";
  }
  absl::StatusOr<sim::Plan> plan = sim::MakePlan(*config, options);
  if (!plan.ok()) return ReportError(plan.status());
  if (!out.empty()) {
    std::ofstream json(out);
    json << plan->ToJson().dump(2) << "\n";
    if (!json) return ReportError(absl::InternalError("cannot write " + out));
  }
  std::vector<const sim::PlanCandidate*> ranked;
  for (const sim::PlanCandidate& c : plan->candidates) ranked.push_back(&c);
  std::sort(ranked.begin(), ranked.end(),
            [](const auto* a, const auto* b) { return a->samples_per_s > b->samples_per_s; });
  std::cout << plan->candidates.size() << " deployments simulated (" << options.steps
            << " learner steps each); the fastest:\n";
  for (size_t i = 0; i < std::min<size_t>(8, ranked.size()); ++i) PrintCandidate(*ranked[i]);
  if (plan->best < 0) {
    std::cout << "no deployment reaches " << options.target_samples_per_s
              << " trained samples/s: raise --max-devices or the workload's concurrency\n";
    return 1;
  }
  const sim::PlanCandidate& best = plan->candidates[plan->best];
  std::cout << (options.target_samples_per_s > 0
                    ? fmt::format("cheapest reaching {} trained samples/s:\n",
                                  options.target_samples_per_s)
                    : std::string("recommended (fastest on the budget):\n"));
  PrintCandidate(best);
  for (const auto& [scale, rate] : plan->latency_sensitivity) {
    std::cout << fmt::format("  environment latency x{}: {:.3f} trained samples/s ({:+.0f} %)\n",
                             scale, rate, 100 * (rate / std::max(1e-12, best.samples_per_s) - 1));
  }
  if (plan->elastic_advice.has_value()) {
    const sim::ElasticAdvice& advice = *plan->elastic_advice;
    std::cout << "elastic or static, on " << advice.devices << " devices at eta "
              << advice.max_staleness << ":\n";
    for (const sim::ElasticAdvice::Load& l : advice.loads) {
      std::cout << fmt::format(
          "  environment latency x{}: best static split {} generating; elastic {:.3f}x it, "
          "{} generating {:.3f}x\n",
          l.latency_scale, l.best_k, l.best_seconds / l.elastic_seconds, advice.fixed_k,
          l.best_seconds / l.fixed_seconds);
    }
    std::cout << "  " << advice.verdict << "\n";
  }
  return 0;
}

}  // namespace

void AddPlanCommand(CLI::App& app, Invocation& invocation) {
  struct Args {
    std::string file;
    std::string out;
    std::string from_run;
    std::vector<std::string> overrides;
    sim::PlanOptions options;
  };
  auto args = std::make_shared<Args>();
  CLI::App* plan = app.add_subcommand(
      "plan", "Size a deployment: simulate device counts, splits, staleness bounds, concurrency");
  plan->add_option("config", args->file, "simulation config (TOML) describing the workload")
      ->required();
  plan->add_option("--target-samples-per-s", args->options.target_samples_per_s,
                   "find the cheapest deployment reaching this many trained samples/s");
  plan->add_option("--max-devices", args->options.max_devices,
                   "device budget (default: cluster.devices)");
  plan->add_option("--steps", args->options.steps, "learner steps simulated per candidate")
      ->capture_default_str();
  plan->add_option("--out", args->out, "write every candidate as JSON");
  plan->add_option("--from-run", args->from_run,
                   "take the environment latency from a real run's latency audit (runs/NAME)");
  plan->add_option("--set", args->overrides, "override a key, e.g. --set run.group_size=16")
      ->take_all();
  plan->callback([args, &invocation] {
    invocation.run = [args] {
      return Run(args->file, args->overrides, args->options, args->from_run, args->out);
    };
  });
}

}  // namespace flywheel::cli
