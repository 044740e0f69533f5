// flywheel env check [--timeout S] [--episodes N] -- CMD ARGS…
// flywheel env play FILE [--policy expert|random] [--episodes N] [--set k=v …]
#include <fmt/format.h>

#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "flywheel/cli/command.h"
#include "flywheel/core/clock.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/env/process/env_check.h"
#include "flywheel/env/task_source.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel::cli {
namespace {

int RunCheck(const std::vector<std::string>& command, const EnvCheckOptions& options) {
  std::cout << "flywheel env check: " << Join(command, " ") << "\n";
  const EnvCheckReport report = CheckEnvironment(command, options);
  for (const auto& line : report.passed) std::cout << "  ok         " << line << "\n";
  for (const auto& line : report.notes) std::cout << "  note       " << line << "\n";
  for (const auto& line : report.violations) std::cout << "  VIOLATION  " << line << "\n";
  if (report.ok()) {
    std::cout << "passed: the environment follows protocol version 1\n";
    return 0;
  }
  std::cout << report.violations.size() << " violation(s); see docs/env-protocol.md\n";
  return 1;
}

absl::Status RunPlay(const std::string& file, const std::vector<std::string>& overrides,
                     const std::string& policy_name, int64_t episodes) {
  absl::StatusOr<JobConfig> job = LoadJobConfig(file, overrides);
  if (!job.ok()) return job.status();
  // Latency is charged to a virtual clock: the play is instant and reports environment time.
  VirtualClock clock;
  absl::StatusOr<std::unique_ptr<EnvFactory>> factory = EnvFactory::Create(job->env, &clock);
  if (!factory.ok()) return factory.status();
  absl::StatusOr<std::unique_ptr<Policy>> policy =
      policy_name == "expert" ? (*factory)->MakeExpert() : (*factory)->MakeRandom(job->run.seed);
  if (!policy.ok()) return policy.status();
  TaskSource tasks((*factory)->task_name(), job->run.seed, 1);
  std::unique_ptr<Environment> env = (*factory)->NewEnvironment();
  double reward = 0;
  int64_t steps = 0;
  std::map<std::string, int64_t> ends;
  const absl::Time start = clock.Now();
  const absl::Time wall_start = absl::Now();
  for (int64_t i = 0; i < episodes; ++i) {
    absl::StatusOr<EpisodeSummary> s = RunEpisode(*env, **policy, tasks.Next(), 100000);
    if (!s.ok()) return s.status();
    reward += s->total_reward;
    steps += s->steps;
    ++ends[std::string(EpisodeEndName(s->end))];
  }
  std::vector<std::string> end_counts;
  for (const auto& [name, n] : ends) end_counts.push_back(fmt::format("{}={}", name, n));
  std::cout << fmt::format(
      "{}: {} policy over {} episodes: mean reward {:.3f}, mean steps {:.2f}, ends {}, "
      "injected latency per episode {:.3f} s (virtual), wall time {:.3f} s\n",
      (*factory)->DebugString(), policy_name, episodes, reward / episodes,
      static_cast<double>(steps) / episodes, Join(end_counts, " "),
      absl::ToDoubleSeconds(clock.Now() - start) / episodes,
      absl::ToDoubleSeconds(absl::Now() - wall_start));
  return absl::OkStatus();
}

}  // namespace

void AddEnvCommand(CLI::App& app, Invocation& invocation) {
  CLI::App* env = app.add_subcommand("env", "Check and try environments");
  env->require_subcommand(1);

  struct CheckArgs {
    std::vector<std::string> command;
    EnvCheckOptions options;
  };
  auto check_args = std::make_shared<CheckArgs>();
  CLI::App* check = env->add_subcommand(
      "check", "Drive an external environment through the protocol and report every violation");
  check->add_option("command", check_args->command, "the environment's command, after --")
      ->required();
  check->add_option("--timeout", check_args->options.timeout_seconds, "seconds per reply")
      ->capture_default_str();
  check->add_option("--episodes", check_args->options.episodes, "episodes of random play")
      ->capture_default_str();
  check->add_option("--steps", check_args->options.max_steps, "most steps per episode")
      ->capture_default_str();
  check->callback([check_args, &invocation] {
    invocation.run = [check_args] { return RunCheck(check_args->command, check_args->options); };
  });

  struct PlayArgs {
    std::string file;
    std::vector<std::string> overrides;
    std::string policy = "expert";
    int64_t episodes = 100;
  };
  auto play_args = std::make_shared<PlayArgs>();
  CLI::App* play = env->add_subcommand(
      "play", "Play a job's environment with a scripted policy and print reward statistics");
  play->add_option("file", play_args->file, "job config (TOML)")->required();
  play->add_option("--policy", play_args->policy, "expert or random")
      ->check(CLI::IsMember({"expert", "random"}))
      ->capture_default_str();
  play->add_option("--episodes", play_args->episodes, "episodes to play")->capture_default_str();
  play->add_option("--set", play_args->overrides, "override a key, e.g. --set env.guess.range=64")
      ->take_all();
  play->callback([play_args, &invocation] {
    invocation.run = [play_args] {
      absl::Status s =
          RunPlay(play_args->file, play_args->overrides, play_args->policy, play_args->episodes);
      return s.ok() ? 0 : ReportError(s);
    };
  });
}

}  // namespace flywheel::cli
