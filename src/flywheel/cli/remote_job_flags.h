// The flags `flywheel learner`, `flywheel actor` and `flywheel cell` share: the job config, the
// buffer to reach, the auth token and TLS of the calls (security_flags.h), config overrides, how
// long to retry a service that does not answer yet, and --metrics-listen.
#ifndef FLYWHEEL_CLI_REMOTE_JOB_FLAGS_H_
#define FLYWHEEL_CLI_REMOTE_JOB_FLAGS_H_

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/cli/metrics_listen.h"
#include "flywheel/cli/security_flags.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel::cli {

struct RemoteJobFlags {
  std::string file;
  std::string buffer;
  SecurityFlags security;
  std::vector<std::string> overrides;
  double connect_timeout_s = 30;
  MetricsListenFlag metrics;

  // `file_help`, `token_help`, `set_example` and `timeout_help` say what each flag means to
  // this command.
  void Add(CLI::App* command, const std::string& file_help, const std::string& token_help,
           const std::string& set_example, const std::string& timeout_help) {
    command->add_option("file", file, file_help)->required();
    command->add_option("--buffer", buffer, "buffer address (flywheel serve buffer)")->required();
    security.AddToken(command, token_help);
    security.AddClientTls(command);
    command->add_option("--set", overrides, "override a key, e.g. --set " + set_example)
        ->take_all();
    command->add_option("--connect-timeout", connect_timeout_s, timeout_help)
        ->capture_default_str();
    metrics.Add(command);
  }

  absl::StatusOr<JobConfig> LoadJob() const { return LoadJobConfig(file, overrides); }
  // The token (empty without --auth-token-file) and the TLS files, read and checked.
  absl::StatusOr<RpcSecurity> Security() const { return security.Load(); }
  absl::Duration connect_timeout() const { return absl::Seconds(connect_timeout_s); }
};

}  // namespace flywheel::cli

#endif  // FLYWHEEL_CLI_REMOTE_JOB_FLAGS_H_
