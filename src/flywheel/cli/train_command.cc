// flywheel train CONFIG [--set k=v …] [--resume] [--metrics-listen HOST:PORT]
//                [--dashboard-listen HOST:PORT]
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/cli/command.h"
#include "flywheel/cli/metrics_listen.h"
#include "flywheel/cli/dashboard_flag.h"
#include "flywheel/cli/stop_signals.h"
#include "flywheel/runtime/embedded_job.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/runtime/tree_job.h"

namespace flywheel::cli {
namespace {

// tree.enabled: the repair harness driven by the policy, trained on trees (runtime/tree_job.h).
int RunTreeTraining(const JobConfig& job, bool resume, const std::atomic<bool>& stop) {
  TreeJobRunOptions options;
  options.resume = resume;
  options.progress = stdout;
  options.stop = &stop;
  auto result = RunTreeJob(job, options);
  if (!result.ok()) return ReportError(result.status());
  std::cout << "run " << result->run_dir.string() << ": " << result->steps << " steps, version "
            << result->version << ", reward " << result->first_reward << " (first step) -> "
            << result->last_reward << " (last); executions in "
            << (result->run_dir / "calls.jsonl").string() << "\n";
  return 0;
}

}  // namespace

void AddTrainCommand(CLI::App& app, Invocation& invocation) {
  struct Args {
    std::string file;
    std::vector<std::string> overrides;
    bool resume = false;
    MetricsListenFlag metrics;
    std::string dashboard_listen;
  };
  auto args = std::make_shared<Args>();
  CLI::App* train = app.add_subcommand(
      "train", "Train a policy in one process: actors, buffer and learner (run.mode)");
  train->add_option("file", args->file, "job config (TOML)")->required();
  train->add_option("--set", args->overrides, "override a key, e.g. --set learner.lr=3e-4")
      ->take_all();
  train->add_flag("--resume", args->resume,
                  "continue runs/<name> from its latest complete checkpoint");
  args->metrics.Add(train);
  train->add_option("--dashboard-listen", args->dashboard_listen, kDashboardListenHelp);
  train->callback([args, &invocation] {
    invocation.run = [args] {
      auto job = LoadJobConfig(args->file, args->overrides);
      if (!job.ok()) return ReportError(job.status());
      auto metrics = args->metrics.Start();
      if (!metrics.ok()) return ReportError(metrics.status());
      auto dashboard = StartDashboardIfAsked(args->dashboard_listen, *job, std::cout);
      if (!dashboard.ok()) return ReportError(dashboard.status());
      // SIGINT/SIGTERM: stop within the stop bound, summary written, exit 0.
      StopSignals signals;
      if (job->tree.enabled) return RunTreeTraining(*job, args->resume, signals.stop());
      EmbeddedJobOptions options;
      options.resume = args->resume;
      options.stop = &signals.stop();
      options.progress = stdout;
      options.progress_is_terminal = isatty(fileno(stdout)) != 0;
      auto result = RunEmbeddedJob(*job, options);
      if (!result.ok()) return ReportError(result.status());
      std::cout << "run " << job->run.runs_dir << "/" << job->run.name << ": " << result->final_step
                << " steps (stopped by " << result->summary.value("stopped_by", "") << ")"
                << ", last reward " << result->last_reward << ", last success "
                << result->last_success << "\n";
      if (result->eval.has_value()) {
        std::cout << "evaluation of the final policy (" << result->eval->episodes
                  << " episodes): reward " << result->eval->reward_mean << " ± "
                  << result->eval->reward_stderr << ", success " << result->eval->success_rate
                  << "\n";
      }
      std::cout << result->summary.value("verdict", "") << "\n";
      return 0;
    };
  });
}

}  // namespace flywheel::cli
