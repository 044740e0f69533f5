// A child process with line-oriented pipes on stdin/stdout, stderr kept as a short tail for
// error messages. Reads wait with poll() until a deadline. Not thread-safe: one owner at a time.
#ifndef FLYWHEEL_ENV_PROCESS_SUBPROCESS_H_
#define FLYWHEEL_ENV_PROCESS_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace flywheel {

class Subprocess {
 public:
  // Starts argv[0] (looked up on PATH) in its own process group.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(const std::vector<std::string>& argv);
  ~Subprocess();  // kills the process group if still running

  // Writes `line` and a newline. UNAVAILABLE when the process no longer reads (exited);
  // DEADLINE_EXCEEDED when its stdin pipe stays full for `timeout` (it stopped reading).
  absl::Status WriteLine(std::string_view line, absl::Duration timeout = absl::Seconds(5));

  // The next stdout line without its newline, waiting until `deadline` (real time).
  //   DEADLINE_EXCEEDED   no complete line in time
  //   UNAVAILABLE         stdout closed (the process exited or closed it)
  //   RESOURCE_EXHAUSTED  the line is longer than max_bytes (the process is out of sync)
  absl::StatusOr<std::string> ReadLine(absl::Time deadline, size_t max_bytes);

  // Waits for the process to exit until `deadline`; true if it did.
  bool WaitExit(absl::Time deadline);
  // SIGKILL to the process group, then reaps it.
  void Kill();

  // "running", "exited with code 3", "killed by signal 9 (Killed)".
  std::string ExitDescription() const;
  bool exited() const { return exited_; }
  // False once the process has exited (checks without blocking).
  bool Running() { return !Reap(false); }
  int exit_code() const;  // -1 unless exited normally
  // The last few lines the process wrote to stderr, for error messages.
  std::string StderrTail() const;
  pid_t pid() const { return pid_; }

 private:
  Subprocess() = default;
  void DrainStderr();
  bool Reap(bool block);

  pid_t pid_ = -1;
  int stdin_fd_ = -1, stdout_fd_ = -1, stderr_fd_ = -1;
  std::string stdout_buffer_;
  std::string stderr_tail_;
  bool exited_ = false;
  int wait_status_ = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_PROCESS_SUBPROCESS_H_
