// flywheel actor --buffer ADDR --weights ADDR CONFIG [--actor-index i] [--auth-token-file F]
//                [--set k=v …]
//
// Actor threads of a job split into processes (see docs/distributed.md): generates episodes
// with the learner's newest weights and inserts them into the remote buffer until the learner
// finishes or a signal arrives. One line per weight swap on stdout.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/buffer/service.h"
#include "flywheel/cli/command.h"
#include "flywheel/cli/stop_signals.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/runtime/remote_actor.h"

namespace flywheel::cli {

void AddActorCommand(CLI::App& app, Invocation& invocation) {
  struct Args {
    std::string file;
    std::string buffer;
    std::string weights;
    std::string auth_token_file;
    std::vector<std::string> overrides;
    int64_t actor_index = 0;
    double connect_timeout_s = 30;
    double poll_interval_s = 0.5;
  };
  auto args = std::make_shared<Args>();
  CLI::App* actor = app.add_subcommand(
      "actor", "Generate episodes into a remote buffer with weights from a remote learner");
  actor->add_option("file", args->file, "job config (TOML), the learner's")->required();
  actor->add_option("--buffer", args->buffer, "buffer address (flywheel serve buffer)")->required();
  actor->add_option("--weights", args->weights, "learner's weights address (--weights-listen)")
      ->required();
  actor
      ->add_option("--actor-index", args->actor_index,
                   "this process's index: actor ids and task streams differ per index")
      ->capture_default_str();
  actor->add_option("--auth-token-file", args->auth_token_file,
                    "token for the buffer and the weights service");
  actor->add_option("--set", args->overrides, "override a key, e.g. --set actor.num_actors=2")
      ->take_all();
  actor
      ->add_option("--connect-timeout", args->connect_timeout_s,
                   "seconds to keep retrying an unreachable buffer or weights service")
      ->capture_default_str();
  actor
      ->add_option("--poll-interval", args->poll_interval_s,
                   "seconds between two checks for newer weights")
      ->capture_default_str();
  actor->callback([args, &invocation] {
    invocation.run = [args] {
      auto job = LoadJobConfig(args->file, args->overrides);
      if (!job.ok()) return ReportError(job.status());
      if (args->actor_index < 0) {
        return ReportError(absl::InvalidArgumentError("--actor-index must be >= 0"));
      }
      RemoteActorOptions options;
      options.buffer_address = args->buffer;
      options.weights_address = args->weights;
      options.actor_index = args->actor_index;
      options.connect_timeout = absl::Seconds(args->connect_timeout_s);
      options.poll_interval = absl::Seconds(args->poll_interval_s);
      if (!args->auth_token_file.empty()) {
        auto token = ReadAuthTokenFile(args->auth_token_file);
        if (!token.ok()) return ReportError(token.status());
        options.auth_token = *token;
      }
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
