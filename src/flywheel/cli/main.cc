// The `flywheel` command. See docs/cli.md.
#include <iostream>

#include <absl/debugging/failure_signal_handler.h>
#include <absl/debugging/symbolize.h>
#include <spdlog/spdlog.h>

#include "flywheel/cli/command.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/malloc_tuning.h"

namespace flywheel::cli {

int ReportError(const absl::Status& status) {
  std::cerr << "flywheel: error: " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

namespace {

int Main(int argc, char** argv) {
  // A crash (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) prints its stack to stderr before the
  // process dies of the same signal: a run on a borrowed machine cannot be repeated under gdb.
  absl::InitializeSymbolizer(argv[0]);
  absl::InstallFailureSignalHandler(absl::FailureSignalHandlerOptions());
  TuneMallocForTensors();  // before any thread starts (core/malloc_tuning.h says why)
  CLI::App app{"flywheel: asynchronous reinforcement learning for language-model agents"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "flywheel 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical, off")
      ->capture_default_str();

  Invocation invocation;
  AddConfigCommand(app, invocation);
  AddBenchCommand(app, invocation);
  AddTrajectoryCommand(app, invocation);
  AddEnvCommand(app, invocation);
  AddServeCommand(app, invocation);
  AddTrainCommand(app, invocation);
  AddLearnerCommand(app, invocation);
  AddActorCommand(app, invocation);
  AddCellCommand(app, invocation);
  AddLaunchCommand(app, invocation);
  AddSimCommand(app, invocation);
  AddPlanCommand(app, invocation);
  AddReportCommand(app, invocation);
  AddChaosCommand(app, invocation);
  AddExportCommand(app, invocation);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (absl::Status s = SetLogLevel(log_level); !s.ok()) return ReportError(s);
  if (!invocation.run) {
    std::cerr << app.help();
    return 2;
  }
  return invocation.run();
}

}  // namespace
}  // namespace flywheel::cli

int main(int argc, char** argv) { return flywheel::cli::Main(argc, argv); }
