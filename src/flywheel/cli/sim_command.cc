// flywheel sim CONFIG.toml [--out DIR] [--set k=v …]: the cluster simulator (docs/simulator.md).
// flywheel sim calibrate JOB.toml [--set k=v …] [--out SIM.toml]: the simulator config of a
// `flywheel train` job, its costs measured on this machine (sim/calibration.h).
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/cli/command.h"
#include "flywheel/core/strings.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/sim/calibration.h"
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

// The measured figures, as comment lines above the TOML they became.
std::string CalibrationHeader(const std::string& job_file, const nlohmann::json& report) {
  const nlohmann::json& m = report["measured"];
  const nlohmann::json& e = m["episodes"];
  return fmt::format(
      "# The simulator config of the job {}, its costs measured on this machine by\n"
      "# `flywheel sim calibrate` in {:.1f} s (emulated slowdown {}):\n"
      "#   decode step of b sequences   {:.3g} s + {:.3g} s x b\n"
      "#   learner step on T tokens     {:.3g} s + {:.3g} s x T\n"
      "#   weight swap into an engine   {:.3g} s\n"
      "#   {} episodes recorded: {:.3g} turns, {:.3g} generated tokens, {:.3g} tokens on average\n"
      "# Run it: flywheel sim THIS.toml [--set run.mode=\\\"colocated\\\"]\n\n",
      job_file, report["seconds"].get<double>(), report["emulated_slowdown"].get<double>(),
      m["decode_overhead_s"].get<double>(), m["decode_seconds_per_sequence"].get<double>(),
      m["step_overhead_s"].get<double>(), m["train_seconds_per_token"].get<double>(),
      m["weight_swap_s"].get<double>(), e["count"].get<int64_t>(),
      e["mean_turns"].get<double>(), e["mean_generated_tokens"].get<double>(),
      e["mean_tokens"].get<double>());
}

void AddCalibrateCommand(CLI::App& sim, Invocation& invocation) {
  struct Args {
    std::string file;
    std::string out;
    std::string report;
    std::vector<std::string> overrides;
    sim::CalibrationOptions options;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = sim.add_subcommand(
      "calibrate",
      "Measure a flywheel train job's costs on this machine and write the simulator config of it");
  cmd->add_option("config", args->file, "the job's config (TOML of flywheel train)")->required();
  cmd->add_option("--set", args->overrides, "override a key of the job, e.g. --set run.mode=async")
      ->take_all();
  cmd->add_option("--out", args->out, "simulator config to write (default: print it)");
  cmd->add_option("--report", args->report, "write the measurements and fits as JSON here");
  cmd->add_option("--episodes", args->options.episodes, "episodes recorded for the trace")
      ->check(CLI::PositiveNumber);
  cmd->callback([args, &invocation] {
    invocation.run = [args] {
      absl::StatusOr<JobConfig> job = LoadJobConfig(args->file, args->overrides);
      if (!job.ok()) return ReportError(job.status());
      absl::StatusOr<sim::Calibration> calibration = sim::CalibrateJob(*job, args->options);
      if (!calibration.ok()) return ReportError(calibration.status());
      const std::string toml =
          CalibrationHeader(args->file, calibration->report) + sim::FormatSimConfig(calibration->sim);
      if (!args->report.empty()) {
        std::ofstream report(args->report);
        report << calibration->report.dump(2) << "\n";
        if (!report) return ReportError(absl::InternalError(StrCat("cannot write ", args->report)));
      }
      if (args->out.empty()) {
        std::cout << toml;
        return 0;
      }
      std::ofstream out(args->out);
      out << toml;
      if (!out) return ReportError(absl::InternalError(StrCat("cannot write ", args->out)));
      std::cout << "wrote " << args->out << ": the job's costs measured in "
                << fmt::format("{:.1f}", calibration->report["seconds"].get<double>())
                << " s; simulate it with: flywheel sim " << args->out << "\n";
      return 0;
    };
  });
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
  // Required unless a subcommand (calibrate) is given: checked in the callback.
  sim->add_option("config", args->file, "simulation config (TOML: [run] [cluster] [workload] …)");
  sim->add_option("--out", args->out, "run directory to write (default: run.runs_dir/run.name)");
  sim->add_option("--set", args->overrides, "override a key, e.g. --set run.mode=async")
      ->take_all();
  AddCalibrateCommand(*sim, invocation);
  sim->callback([sim, args, &invocation] {
    if (sim->got_subcommand("calibrate")) return;
    if (args->file.empty()) throw CLI::RequiredError("config");
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
