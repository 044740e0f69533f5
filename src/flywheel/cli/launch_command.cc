// flywheel launch --nproc N [--rendezvous HOST:PORT] [--grace-period S] -- COMMAND ARGS…
//
// Starts N ranks of `flywheel COMMAND ARGS… --world-size N --rank R --rendezvous HOST:PORT` on
// this host, as torchrun does: output prefixed with "[rank R] ", SIGINT/SIGTERM forwarded, the
// rest stopped when one fails, the first failure's exit code returned. See
// docs/distributed-learner.md.
#include <memory>
#include <string>
#include <vector>

#include "flywheel/cli/command.h"
#include "flywheel/dist/launcher.h"

namespace flywheel::cli {

void AddLaunchCommand(CLI::App& app, Invocation& invocation) {
  struct Args {
    dist::LaunchOptions options;
    double grace_seconds = 10;
    bool no_rank_flags = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* launch = app.add_subcommand(
      "launch",
      "Start N ranks of a command on this host, as torchrun: launch --nproc N -- learner …");
  launch->add_option("--nproc", args->options.nproc, "number of ranks to start")->required();
  launch->add_option(
      "--rendezvous", args->options.rendezvous,
      "HOST:PORT where rank 0 hosts the rendezvous (default: 127.0.0.1, a free port)");
  launch
      ->add_option("--grace-period", args->grace_seconds,
                   "seconds between SIGTERM and SIGKILL for the other ranks after a failure")
      ->capture_default_str();
  launch->add_flag("--no-rank-flags", args->no_rank_flags,
                   "do not append --world-size/--rank/--rendezvous (the ranks read RANK, "
                   "WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the environment)");
  launch->add_option("command", args->options.args, "the flywheel command of every rank, after --")
      ->required();
  launch->callback([args, &invocation] {
    invocation.run = [args] {
      dist::LaunchOptions options = args->options;
      options.grace_period = absl::Seconds(args->grace_seconds);
      options.append_rank_flags = !args->no_rank_flags;
      auto result = dist::Launch(options);
      if (!result.ok()) return ReportError(result.status());
      return result->exit_code;
    };
  });
}

}  // namespace flywheel::cli
