// A child process as `flywheel chaos` runs them: started with posix_spawn, its stdout and
// stderr appended to files, signalled (SIGKILL, SIGSTOP / SIGCONT, SIGTERM) and reaped without
// blocking. The destructor kills a child that still runs, so a failing chaos run leaves no
// process behind. Not thread-safe.
#ifndef FLYWHEEL_CHAOS_CHILD_PROCESS_H_
#define FLYWHEEL_CHAOS_CHILD_PROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace flywheel::chaos {

class ChildProcess {
 public:
  // Starts argv[0] (a path) with `argv`; stdout and stderr are appended to the two files.
  static absl::StatusOr<ChildProcess> Spawn(const std::vector<std::string>& argv,
                                            const std::string& stdout_path,
                                            const std::string& stderr_path);
  ChildProcess() = default;
  ChildProcess(ChildProcess&& other) noexcept { *this = std::move(other); }
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !status_.has_value(); }
  // Sends `signal` to a running child (nothing once it exited).
  void Signal(int signal) const;
  // The exit status (as waitpid reports it) once the child exited; reaps it without blocking.
  std::optional<int> Poll();
  // Waits up to `timeout` for the child to exit, then SIGKILLs it; returns its status.
  int Wait(absl::Duration timeout);
  // "exit 1", "signal 9", …
  static std::string Describe(int status);

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

}  // namespace flywheel::chaos

#endif  // FLYWHEEL_CHAOS_CHILD_PROCESS_H_
