// flywheel learner --buffer ADDR CONFIG [--weights-listen HOST:PORT] [--auth-token-file F]
//                  [--tls-cert F --tls-key F [--tls-client-ca F]] [--tls-ca F
//                  [--tls-client-cert F --tls-client-key F]] [--insecure]
//                  [--set k=v …] [--resume]
//                  [--world-size N --rank R --rendezvous HOST:PORT]
//                  [--metrics-listen HOST:PORT] [--dashboard-listen HOST:PORT]
//
// The learner of a job split into processes (see docs/distributed.md). The first line on
// stdout says where the weights are served ("flywheel: learner serving weights on
// 127.0.0.1:7400 …"), so scripts and tests can ask for port 0 and read the port back.
//
// With --world-size N (as `flywheel launch --nproc N -- learner …` appends them) the learner
// is one rank of a group (docs/distributed-learner.md): rank 0 is the learner above, ranks > 0
// train on the batches rank 0 sends them. --world-size sets learner.world_size, which must be
// 1 in the config or equal to it. An error of any rank names a rank that stopped, if one did.
//
// With run.mode = "elastic" the learner is the core cell of an elastic job and takes
// --scheduler-listen HOST:PORT, where `flywheel cell` processes register; the first line then
// also names the scheduler's address ("… scheduler on 127.0.0.1:7500").
#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/cli/command.h"
#include "flywheel/cli/dashboard_flag.h"
#include "flywheel/cli/remote_job_flags.h"
#include "flywheel/cli/stop_signals.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/observe/trace_recorder.h"
#include "flywheel/elastic/elastic_core.h"
#include "flywheel/runtime/learner_group.h"
#include "flywheel/runtime/remote_learner.h"

namespace flywheel::cli {

namespace {

struct LearnerArgs {
  RemoteJobFlags job;
  std::string weights_listen = "127.0.0.1:7400";
  std::string scheduler_listen;
  std::string dashboard_listen;
  bool resume = false;
  bool no_leases = false;
  LearnerGroupOptions group;
};

void PrintRun(const JobConfig& job, const RemoteLearnerResult& result) {
  std::cout << "run " << job.run.runs_dir << "/" << job.run.name << ": " << result.final_step
            << " steps" << (result.stopped ? " (stopped by signal)" : "") << ", last reward "
            << result.last_reward << ", last success " << result.last_success << std::endl;
}

// The core of an elastic job (elastic_core.h).
int RunCore(const LearnerArgs& args, const JobConfig& job) {
  if (job.run.mode != TrainMode::kElastic) {
    return ReportError(absl::InvalidArgumentError(
        "--scheduler-listen serves the elastic scheduler: set run.mode = \"elastic\""));
  }
  if (args.scheduler_listen.empty()) {
    return ReportError(absl::InvalidArgumentError(
        "run.mode = \"elastic\": give --scheduler-listen HOST:PORT, where `flywheel cell` "
        "processes register"));
  }
  if (args.group.world_size > 1) {
    return ReportError(absl::InvalidArgumentError(
        "run.mode = \"elastic\" trains on its cells' streaming group, not on --world-size ranks"));
  }
  ElasticCoreOptions options;
  options.buffer_address = args.job.buffer;
  options.weights_listen = args.weights_listen;
  options.scheduler_listen = args.scheduler_listen;
  options.resume = args.resume;
  options.connect_timeout = args.job.connect_timeout();
  auto security = args.job.Security();
  if (!security.ok()) return ReportError(security.status());
  options.security = *std::move(security);
  StopSignals signals;  // SIGINT/SIGTERM: stop cleanly, exit 0
  options.stop = &signals.stop();
  options.progress_is_terminal = isatty(fileno(stdout)) != 0;
  options.on_serving = [&](const std::string& weights, const std::string& scheduler) {
    std::cout << "flywheel: learner serving weights on " << weights << ", scheduler on "
              << scheduler << " (buffer " << args.job.buffer
              << ", auth=" << (options.security.auth_token.empty() ? "off" : "on")
              << ", tls=" << options.security.ServerTlsMode() << ")" << std::endl;
  };
  auto result = RunElasticCore(job, options);
  if (!result.ok()) return ReportError(result.status());
  PrintRun(job, *result);
  return 0;
}

}  // namespace

void AddLearnerCommand(CLI::App& app, Invocation& invocation) {
  auto args = std::make_shared<LearnerArgs>();
  CLI::App* learner = app.add_subcommand(
      "learner", "Train on groups from a remote buffer and serve the weights to actors");
  args->job.Add(learner, "job config (TOML)",
                "token for the buffer, also required from actors fetching weights",
                "learner.lr=3e-4", "seconds to keep retrying an unreachable buffer");
  args->job.security.AddServerTls(learner, "the weights (and the elastic scheduler)");
  learner
      ->add_option("--weights-listen", args->weights_listen,
                   "serve weights on HOST:PORT (port 0 = any free port)")
      ->capture_default_str();
  learner->add_option("--scheduler-listen", args->scheduler_listen,
                      "run.mode = \"elastic\": serve the scheduler for `flywheel cell` processes "
                      "on HOST:PORT (port 0 = any free port)");
  learner->add_flag("--resume", args->resume,
                    "continue runs/<name> from its latest complete checkpoint");
  // Tests only (flywheel chaos --break leases): shows what the lease protocol prevents.
  learner->add_flag("--no-leases", args->no_leases,
                    "sample without leases: a learner killed before its next checkpoint loses "
                    "what it sampled since the last one (tests)")
      ->group("");
  learner->add_option("--dashboard-listen", args->dashboard_listen, kDashboardListenHelp);
  learner->add_option("--world-size", args->group.world_size,
                      "learner ranks in the group (sets learner.world_size)");
  learner->add_option("--rank", args->group.rank, "this process's rank, 0..world-size-1");
  learner->add_option("--rendezvous", args->group.rendezvous,
                      "HOST:PORT of rank 0's rendezvous store (flywheel launch sets it)");
  learner->callback([args, &invocation] {
    invocation.run = [args] {
      auto job = args->job.LoadJob();
      if (!job.ok()) return ReportError(job.status());
      auto metrics = args->job.metrics.Start();
      if (!metrics.ok()) return ReportError(metrics.status());
      const TraceRecording trace(job->run.trace, job->run.trace_spans_per_track);
      // On stderr: stdout's first line is the weights address, which scripts read.
      auto dashboard = StartDashboardIfAsked(args->dashboard_listen, *job, std::cerr);
      if (!dashboard.ok()) return ReportError(dashboard.status());
      if (job->run.mode == TrainMode::kElastic || !args->scheduler_listen.empty()) {
        return RunCore(*args, *job);
      }
      if (absl::Status s = args->group.Validate(); !s.ok()) return ReportError(s);
      if (absl::Status s = ApplyWorldSize(args->group.world_size, args->job.file, *job); !s.ok()) {
        return ReportError(s);
      }
      std::unique_ptr<LearnerGroup> group;
      if (args->group.world_size > 1) {
        args->group.connect_timeout = args->job.connect_timeout();
        auto joined = LearnerGroup::Join(args->group, *job);
        if (!joined.ok()) {
          return ReportError(Annotate(joined.status(), StrCat("learner rank ", args->group.rank)));
        }
        group = *std::move(joined);
      }
      RemoteLearnerOptions options;
      options.buffer_address = args->job.buffer;
      options.weights_listen = args->weights_listen;
      options.resume = args->resume;
      options.leases = !args->no_leases;
      options.connect_timeout = args->job.connect_timeout();
      auto security = args->job.Security();
      if (!security.ok()) return ReportError(security.status());
      options.security = *std::move(security);
      StopSignals signals;  // SIGINT/SIGTERM: stop cleanly, exit 0
      options.stop = &signals.stop();
      options.group = group != nullptr ? group->communicator() : nullptr;
      // Ranks > 0 print nothing per step: rank 0's progress is the group's.
      options.progress = args->group.rank == 0 ? stdout : nullptr;
      options.progress_is_terminal = isatty(fileno(stdout)) != 0;
      options.on_serving = [&](const std::string& address) {
        std::cout << "flywheel: learner serving weights on " << address << " (buffer "
                  << args->job.buffer
                  << ", auth=" << (options.security.auth_token.empty() ? "off" : "on")
                  << ", tls=" << options.security.ServerTlsMode() << ")" << std::endl;
      };
      auto result = RunRemoteLearner(*job, options);
      if (!result.ok()) {
        absl::Status error = result.status();
        if (group != nullptr) {
          error = Annotate(group->Explain(error), StrCat("learner rank ", args->group.rank, " of ",
                                                         args->group.world_size));
          group->Close();
        }
        return ReportError(error);
      }
      if (group != nullptr) group->Close();
      if (args->group.rank > 0) {
        std::cout << "learner rank " << args->group.rank << " of " << args->group.world_size
                  << ": followed rank 0 to step " << result->final_step << std::endl;
        return 0;
      }
      PrintRun(*job, *result);
      return 0;
    };
  });
}

}  // namespace flywheel::cli
