// flywheel learner --buffer ADDR CONFIG [--weights-listen HOST:PORT] [--auth-token-file F]
//                  [--set k=v …] [--resume]
//
// The learner of a job split into processes (see docs/distributed.md). The first line on
// stdout says where the weights are served ("flywheel: learner serving weights on
// 127.0.0.1:7400 …"), so scripts and tests can ask for port 0 and read the port back.
#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/cli/command.h"
#include "flywheel/cli/remote_job_flags.h"
#include "flywheel/cli/stop_signals.h"
#include "flywheel/runtime/remote_learner.h"

namespace flywheel::cli {

void AddLearnerCommand(CLI::App& app, Invocation& invocation) {
  struct Args {
    RemoteJobFlags job;
    std::string weights_listen = "127.0.0.1:7400";
    bool resume = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* learner = app.add_subcommand(
      "learner", "Train on groups from a remote buffer and serve the weights to actors");
  args->job.Add(learner, "job config (TOML)",
                "token for the buffer, also required from actors fetching weights",
                "learner.lr=3e-4", "seconds to keep retrying an unreachable buffer");
  learner
      ->add_option("--weights-listen", args->weights_listen,
                   "serve weights on HOST:PORT (port 0 = any free port)")
      ->capture_default_str();
  learner->add_flag("--resume", args->resume,
                    "continue runs/<name> from its latest complete checkpoint");
  learner->callback([args, &invocation] {
    invocation.run = [args] {
      auto job = args->job.LoadJob();
      if (!job.ok()) return ReportError(job.status());
      RemoteLearnerOptions options;
      options.buffer_address = args->job.buffer;
      options.weights_listen = args->weights_listen;
      options.resume = args->resume;
      options.connect_timeout = args->job.connect_timeout();
      auto token = args->job.AuthToken();
      if (!token.ok()) return ReportError(token.status());
      options.auth_token = *token;
      StopSignals signals;  // SIGINT/SIGTERM: stop cleanly, exit 0
      options.stop = &signals.stop();
      options.progress = stdout;
      options.progress_is_terminal = isatty(fileno(stdout)) != 0;
      options.on_serving = [&](const std::string& address) {
        std::cout << "flywheel: learner serving weights on " << address << " (buffer "
                  << args->job.buffer << ", auth=" << (options.auth_token.empty() ? "off" : "on") << ")"
                  << std::endl;
      };
      auto result = RunRemoteLearner(*job, options);
      if (!result.ok()) return ReportError(result.status());
      std::cout << "run " << job->run.runs_dir << "/" << job->run.name << ": " << result->final_step
                << " steps" << (result->stopped ? " (stopped by signal)" : "") << ", last reward "
                << result->last_reward << ", last success " << result->last_success << std::endl;
      return 0;
    };
  });
}

}  // namespace flywheel::cli
