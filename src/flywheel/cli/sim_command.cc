// flywheel sim CONFIG.toml [--out DIR] [--set k=v …]: the cluster simulator (docs/simulator.md).
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/cli/command.h"
#include "flywheel/sim/simulator.h"

namespace flywheel::cli {
namespace {

// One line a reader can act on: what was simulated and the figures that size a deployment.
std::string Headline(const sim::SimConfig& config, const nlohmann::json& s) {
  const nlohmann::json& u = s["utilisation"];
  return fmt::format(
      "{} on {} devices: {} steps in {:.3g} simulated h, {:.4g} trained samples/s, learner "
      "utilisation {:.3f}, devices generating {:.3f} / training {:.3f}, ${:.4g} ({} events, "
      "{:.3g} events/s)",
      sim::SimModeName(config.run.mode), config.cluster.devices, s["steps"].get<int64_t>(),
      s["wall_seconds"].get<double>() / 3600, s["trained_samples_per_s"].get<double>(),
      s["learner_utilization"].get<double>(), u["rollout"].get<double>(), u["train"].get<double>(),
      s["cost"]["usd"].get<double>(), s["events"].get<int64_t>(), s["events_per_s"].get<double>());
}

}  // namespace

void AddSimCommand(CLI::App& app, Invocation& invocation) {
  struct Args {
    std::string file;
    std::string out;
    std::vector<std::string> overrides;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sim = app.add_subcommand(
      "sim", "Simulate a training run on a cluster with the project's own scheduling policies");
  sim->add_option("config", args->file, "simulation config (TOML: [run] [cluster] [workload] …)")
      ->required();
  sim->add_option("--out", args->out, "run directory to write (default: run.runs_dir/run.name)");
  sim->add_option("--set", args->overrides, "override a key, e.g. --set run.mode=async")
      ->take_all();
  sim->callback([args, &invocation] {
    invocation.run = [args] {
      absl::StatusOr<sim::SimConfig> config = sim::LoadSimConfig(args->file, args->overrides);
      if (!config.ok()) return ReportError(config.status());
      const std::filesystem::path dir =
          args->out.empty() ? std::filesystem::path(config->run.runs_dir) / config->run.name
                            : std::filesystem::path(args->out);
      absl::StatusOr<sim::SimResult> result = sim::Simulate(*config);
      if (!result.ok()) return ReportError(result.status());
      if (absl::Status s = sim::WriteSimRun(*config, *result, dir); !s.ok()) {
        return ReportError(s);
      }
      std::cout << "run " << dir.string() << ": " << Headline(*config, result->summary) << "\n";
      return 0;
    };
  });
}

}  // namespace flywheel::cli
