// flywheel cell --scheduler ADDR --buffer ADDR CONFIG [--auth-token-file F] [--set k=v …]
//               [--tls-ca F [--tls-client-cert F --tls-client-key F]] [--insecure]
//               [--metrics-listen HOST:PORT]
//
// A satellite cell of an elastic job as its own process (docs/elastic.md): registers with the
// core (`flywheel learner --scheduler-listen`), then rolls out episodes into the buffer or
// trains in the core's streaming steps, as the core's scheduler says, until the core's run
// ends or a signal arrives (it then tells the core it leaves). One line per role switch.
#include <iostream>
#include <memory>
#include <string>

#include "flywheel/cli/command.h"
#include "flywheel/cli/remote_job_flags.h"
#include "flywheel/cli/stop_signals.h"
#include "flywheel/elastic/elastic_cell.h"

namespace flywheel::cli {

void AddCellCommand(CLI::App& app, Invocation& invocation) {
  struct Args {
    RemoteJobFlags job;
    std::string scheduler;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cell = app.add_subcommand(
      "cell", "Join an elastic job as a satellite cell: roll out or train as the core says");
  args->job.Add(cell, "job config (TOML), the core's",
                "token for the scheduler, the buffer and the weights service",
                "run.emulated_slowdown=2",
                "seconds to keep retrying an unreachable core, buffer or weights service");
  cell->add_option("--scheduler", args->scheduler,
                   "the core's scheduler address (flywheel learner --scheduler-listen)")
      ->required();
  cell->callback([args, &invocation] {
    invocation.run = [args] {
      auto job = args->job.LoadJob();
      if (!job.ok()) return ReportError(job.status());
      auto metrics = args->job.metrics.Start();
      if (!metrics.ok()) return ReportError(metrics.status());
      ElasticCellOptions options;
      options.scheduler_address = args->scheduler;
      options.buffer_address = args->job.buffer;
      options.connect_timeout = args->job.connect_timeout();
      auto security = args->job.Security();
      if (!security.ok()) return ReportError(security.status());
      options.security = *std::move(security);
      StopSignals signals;  // SIGINT/SIGTERM: leave cleanly, exit 0
      options.stop = &signals.stop();
      options.log = stdout;
      auto result = RunElasticCell(*job, options);
      if (!result.ok()) return ReportError(result.status());
      return 0;
    };
  });
}

}  // namespace flywheel::cli
