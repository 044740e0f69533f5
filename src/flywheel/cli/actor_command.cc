// flywheel actor --buffer ADDR --weights ADDR CONFIG [--actor-index i] [--auth-token-file F]
//                [--tls-ca F [--tls-client-cert F --tls-client-key F]] [--insecure]
//                [--set k=v …] [--metrics-listen HOST:PORT] [--ack-log FILE]
//
// Actor threads of a job split into processes (see docs/distributed.md): generates episodes
// with the learner's newest weights and inserts them into the remote buffer until the learner
// finishes or a signal arrives. One line per weight swap on stdout.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/cli/command.h"
#include "flywheel/cli/remote_job_flags.h"
#include "flywheel/cli/stop_signals.h"
#include "flywheel/runtime/remote_actor.h"

namespace flywheel::cli {

void AddActorCommand(CLI::App& app, Invocation& invocation) {
  struct Args {
    RemoteJobFlags job;
    std::string weights;
    int64_t actor_index = 0;
    double poll_interval_s = 0.5;
    std::string ack_log;
  };
  auto args = std::make_shared<Args>();
  CLI::App* actor = app.add_subcommand(
      "actor", "Generate episodes into a remote buffer with weights from a remote learner");
  args->job.Add(actor, "job config (TOML), the learner's",
                "token for the buffer and the weights service", "actor.num_actors=2",
                "seconds to keep retrying an unreachable buffer or weights service");
  actor->add_option("--weights", args->weights, "learner's weights address (--weights-listen)")
      ->required();
  actor
      ->add_option("--actor-index", args->actor_index,
                   "this process's index: actor ids and task streams differ per index")
      ->capture_default_str();
  actor
      ->add_option("--poll-interval", args->poll_interval_s,
                   "seconds between two checks for newer weights")
      ->capture_default_str();
  actor->add_option("--ack-log", args->ack_log,
                    "append \"<unix_ms> <id>\" per trajectory the buffer acknowledged to FILE");
  actor->callback([args, &invocation] {
    invocation.run = [args] {
      auto job = args->job.LoadJob();
      if (!job.ok()) return ReportError(job.status());
      auto metrics = args->job.metrics.Start();
      if (!metrics.ok()) return ReportError(metrics.status());
      if (args->actor_index < 0) {
        return ReportError(absl::InvalidArgumentError("--actor-index must be >= 0"));
      }
      RemoteActorOptions options;
      options.buffer_address = args->job.buffer;
      options.weights_address = args->weights;
      options.actor_index = args->actor_index;
      options.connect_timeout = args->job.connect_timeout();
      options.poll_interval = absl::Seconds(args->poll_interval_s);
      options.ack_log = args->ack_log;
      auto security = args->job.Security();
      if (!security.ok()) return ReportError(security.status());
      options.security = *std::move(security);
      StopSignals signals;  // SIGINT/SIGTERM: stop cleanly, exit 0
      options.stop = &signals.stop();
      options.log = stdout;
      auto result = RunRemoteActor(*job, options);
      if (!result.ok()) return ReportError(result.status());
      return 0;
    };
  });
}

}  // namespace flywheel::cli
