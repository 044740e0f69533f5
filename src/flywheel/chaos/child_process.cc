#include "flywheel/chaos/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstring>

#include "absl/time/clock.h"
#include "flywheel/core/strings.h"

extern char** environ;

namespace flywheel::chaos {

absl::StatusOr<ChildProcess> ChildProcess::Spawn(const std::vector<std::string>& argv,
                                                 const std::string& stdout_path,
                                                 const std::string& stderr_path) {
  if (argv.empty()) return absl::InvalidArgumentError("spawn: empty command line");
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, stdout_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_addopen(&files, STDERR_FILENO, stderr_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  // The child starts with no signal blocked and default dispositions, whatever the caller has.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &all);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ChildProcess child;
  const int error =
      posix_spawn(&child.pid_, argv[0].c_str(), &files, &attributes, args.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attributes);
  if (error != 0) {
    child.pid_ = -1;
    return absl::InternalError(StrCat("spawn ", argv[0], ": ", std::strerror(error)));
  }
  return child;
}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    if (running()) Wait(absl::ZeroDuration());
    pid_ = other.pid_;
    status_ = other.status_;
    other.pid_ = -1;
    other.status_.reset();
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (running()) {
    kill(pid_, SIGCONT);  // a frozen child could not be reaped
    Wait(absl::ZeroDuration());
  }
}

void ChildProcess::Signal(int signal) const {
  if (running()) kill(pid_, signal);
}

std::optional<int> ChildProcess::Poll() {
  if (pid_ <= 0 || status_.has_value()) return status_;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) status_ = status;
  return status_;
}

int ChildProcess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!Poll().has_value()) {
    if (pid_ <= 0) return -1;
    if (absl::Now() >= deadline) {
      kill(pid_, SIGCONT);
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      status_ = status;
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return *status_;
}

std::string ChildProcess::Describe(int status) {
  if (WIFEXITED(status)) return StrCat("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return StrCat("signal ", WTERMSIG(status));
  return StrCat("status ", status);
}

}  // namespace flywheel::chaos
