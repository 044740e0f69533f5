// How the `flywheel` command is put together: main.cc owns the CLI11 app and the global flags;
// each file here adds one command group and sets `run` to the action chosen on the command line.
// Commands only parse and wire; the work lives in the component libraries.
#ifndef FLYWHEEL_CLI_COMMAND_H_
#define FLYWHEEL_CLI_COMMAND_H_

#include <functional>

#include <CLI/CLI.hpp>

#include "absl/status/status.h"

namespace flywheel::cli {

struct Invocation {
  // Set by the chosen subcommand's callback; returns the process exit code.
  std::function<int()> run;
};

// Prints a failed Status as "flywheel: error: …" and returns the exit code for it.
int ReportError(const absl::Status& status);

void AddConfigCommand(CLI::App& app, Invocation& invocation);
void AddBenchCommand(CLI::App& app, Invocation& invocation);
void AddTrajectoryCommand(CLI::App& app, Invocation& invocation);
void AddEnvCommand(CLI::App& app, Invocation& invocation);
void AddServeCommand(CLI::App& app, Invocation& invocation);
// `flywheel serve gateway` (gateway_command.cc), under `serve`.
void AddServeGatewayCommand(CLI::App* serve, Invocation& invocation);
void AddTrainCommand(CLI::App& app, Invocation& invocation);
void AddLearnerCommand(CLI::App& app, Invocation& invocation);
void AddActorCommand(CLI::App& app, Invocation& invocation);
void AddCellCommand(CLI::App& app, Invocation& invocation);
void AddLaunchCommand(CLI::App& app, Invocation& invocation);
void AddSimCommand(CLI::App& app, Invocation& invocation);
void AddPlanCommand(CLI::App& app, Invocation& invocation);
void AddReportCommand(CLI::App& app, Invocation& invocation);
void AddChaosCommand(CLI::App& app, Invocation& invocation);
void AddExportCommand(CLI::App& app, Invocation& invocation);

}  // namespace flywheel::cli

#endif  // FLYWHEEL_CLI_COMMAND_H_
