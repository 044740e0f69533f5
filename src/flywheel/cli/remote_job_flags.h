// The flags `flywheel learner`, `flywheel actor` and `flywheel cell` share: the job config, the
// buffer to reach, the auth token, config overrides, how long to retry a service that does not
// answer yet, and --metrics-listen.
#ifndef FLYWHEEL_CLI_REMOTE_JOB_FLAGS_H_
#define FLYWHEEL_CLI_REMOTE_JOB_FLAGS_H_

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/buffer/service.h"
#include "flywheel/cli/metrics_listen.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel::cli {

struct RemoteJobFlags {
  std::string file;
  std::string buffer;
  std::string auth_token_file;
  std::vector<std::string> overrides;
  double connect_timeout_s = 30;
  MetricsListenFlag metrics;

  // `file_help`, `token_help`, `set_example` and `timeout_help` say what each flag means to
  // this command.
  void Add(CLI::App* command, const std::string& file_help, const std::string& token_help,
           const std::string& set_example, const std::string& timeout_help) {
    command->add_option("file", file, file_help)->required();
    command->add_option("--buffer", buffer, "buffer address (flywheel serve buffer)")->required();
    command->add_option("--auth-token-file", auth_token_file, token_help);
    command->add_option("--set", overrides, "override a key, e.g. --set " + set_example)
        ->take_all();
    command->add_option("--connect-timeout", connect_timeout_s, timeout_help)
        ->capture_default_str();
    metrics.Add(command);
  }

  absl::StatusOr<JobConfig> LoadJob() const { return LoadJobConfig(file, overrides); }
  // The token, or empty without --auth-token-file.
  absl::StatusOr<std::string> AuthToken() const {
    if (auth_token_file.empty()) return std::string();
    return ReadAuthTokenFile(auth_token_file);
  }
  absl::Duration connect_timeout() const { return absl::Seconds(connect_timeout_s); }
};

}  // namespace flywheel::cli

#endif  // FLYWHEEL_CLI_REMOTE_JOB_FLAGS_H_
