// Conformance check of an external environment: drives a command through the whole protocol
// (docs/env-protocol.md) and lists every violation, for `flywheel env check -- CMD ARGS`.
#ifndef FLYWHEEL_ENV_PROCESS_ENV_CHECK_H_
#define FLYWHEEL_ENV_PROCESS_ENV_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

namespace flywheel {

struct EnvCheckOptions {
  double timeout_seconds = 10;  // per reply
  int64_t episodes = 3;
  int64_t max_steps = 100;  // per episode; an episode still running after this is only noted
  uint64_t seed = 1;
};

struct EnvCheckReport {
  std::vector<std::string> passed;      // checks that held, one line each
  std::vector<std::string> violations;  // what breaks the protocol, quoting the environment
  std::vector<std::string> notes;       // worth knowing, not violations
  bool ok() const { return violations.empty(); }
};

EnvCheckReport CheckEnvironment(const std::vector<std::string>& command,
                                const EnvCheckOptions& options);

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_PROCESS_ENV_CHECK_H_
