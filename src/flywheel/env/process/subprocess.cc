#include "flywheel/env/process/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/time/clock.h"
#include "flywheel/core/strings.h"

extern char** environ;

namespace flywheel {
namespace {

constexpr size_t kStderrTailBytes = 2048;

void IgnoreSigpipeOnce() {
  // A write to a crashed environment must fail with EPIPE, not kill the trainer.
  static std::once_flag once;
  std::call_once(once, [] { signal(SIGPIPE, SIG_IGN); });
}

int MillisUntil(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 60'000));
}

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const std::vector<std::string>& argv) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command");
  IgnoreSigpipeOnce();
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    return absl::InternalError(StrCat("pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);  // the child gets normal SIGPIPE behaviour back
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setpgroup(&attr, 0);  // own group: Kill() reaches its children too
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(in[0]);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
    close(err[0]);
    return absl::NotFoundError(StrCat("cannot start ", Join(argv, " "), ": ", std::strerror(rc)));
  }
  std::unique_ptr<Subprocess> p(new Subprocess);
  p->pid_ = pid;
  p->stdin_fd_ = in[1];
  p->stdout_fd_ = out[0];
  p->stderr_fd_ = err[0];
  fcntl(p->stdin_fd_, F_SETFL, fcntl(p->stdin_fd_, F_GETFL) | O_NONBLOCK);
  fcntl(p->stdout_fd_, F_SETFL, fcntl(p->stdout_fd_, F_GETFL) | O_NONBLOCK);
  fcntl(p->stderr_fd_, F_SETFL, fcntl(p->stderr_fd_, F_GETFL) | O_NONBLOCK);
  return p;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !exited_) Kill();
  CloseFd(stdin_fd_);
  CloseFd(stdout_fd_);
  CloseFd(stderr_fd_);
}

absl::Status Subprocess::WriteLine(std::string_view line, absl::Duration timeout) {
  if (stdin_fd_ < 0) return absl::UnavailableError("stdin is closed");
  const absl::Time deadline = absl::Now() + timeout;
  std::string data(line);
  data.push_back('\n');
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(stdin_fd_, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd fd = {stdin_fd_, POLLOUT, 0};
      if (poll(&fd, 1, MillisUntil(deadline)) == 0 && absl::Now() >= deadline) {
        return absl::DeadlineExceededError("stdin stayed full (the process stopped reading)");
      }
      continue;
    }
    if (n < 0) {
      return absl::UnavailableError(StrCat("write to stdin: ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

void Subprocess::DrainStderr() {
  char buf[4096];
  while (stderr_fd_ >= 0) {
    const ssize_t n = read(stderr_fd_, buf, sizeof(buf));
    if (n > 0) {
      stderr_tail_.append(buf, static_cast<size_t>(n));
      if (stderr_tail_.size() > 2 * kStderrTailBytes) {
        stderr_tail_.erase(0, stderr_tail_.size() - kStderrTailBytes);
      }
      continue;
    }
    if (n == 0) CloseFd(stderr_fd_);
    return;  // EAGAIN or EOF
  }
}

absl::StatusOr<std::string> Subprocess::ReadLine(absl::Time deadline, size_t max_bytes) {
  while (true) {
    const size_t newline = stdout_buffer_.find('\n');
    if (newline != std::string::npos) {
      if (newline > max_bytes) {
        return absl::ResourceExhaustedError(
            StrCat("a line of ", newline, " bytes is longer than the limit of ", max_bytes));
      }
      std::string line = stdout_buffer_.substr(0, newline);
      stdout_buffer_.erase(0, newline + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return line;
    }
    if (stdout_buffer_.size() > max_bytes) {
      return absl::ResourceExhaustedError(StrCat("a line of more than ", stdout_buffer_.size(),
                                                 " bytes is longer than the limit of ", max_bytes));
    }
    if (stdout_fd_ < 0) return absl::UnavailableError("stdout is closed");
    pollfd fds[2] = {{stdout_fd_, POLLIN, 0}, {stderr_fd_, POLLIN, 0}};
    const int timeout = MillisUntil(deadline);
    const int ready = poll(fds, stderr_fd_ >= 0 ? 2 : 1, timeout);
    if (ready < 0 && errno != EINTR) {
      return absl::InternalError(StrCat("poll: ", std::strerror(errno)));
    }
    if (stderr_fd_ >= 0 && fds[1].revents != 0) DrainStderr();
    if (fds[0].revents != 0) {
      char buf[65536];
      const ssize_t n = read(stdout_fd_, buf, sizeof(buf));
      if (n > 0) {
        stdout_buffer_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {
        DrainStderr();
        CloseFd(stdout_fd_);
        if (!stdout_buffer_.empty()) {
          return absl::UnavailableError(
              StrCat("stdout closed after a partial line \"", stdout_buffer_.substr(0, 200), "\""));
        }
        return absl::UnavailableError("stdout closed");
      }
      if (errno != EAGAIN && errno != EINTR) {
        return absl::InternalError(StrCat("read: ", std::strerror(errno)));
      }
    }
    if (ready == 0 && absl::Now() >= deadline) {
      return absl::DeadlineExceededError("no reply line before the deadline");
    }
  }
}

bool Subprocess::Reap(bool block) {
  if (exited_) return true;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, block ? 0 : WNOHANG);
  if (r == pid_) {
    exited_ = true;
    wait_status_ = status;
  }
  return exited_;
}

bool Subprocess::WaitExit(absl::Time deadline) {
  while (!Reap(false)) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

void Subprocess::Kill() {
  if (pid_ <= 0 || exited_) return;
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);
  Reap(true);
}

int Subprocess::exit_code() const {
  return exited_ && WIFEXITED(wait_status_) ? WEXITSTATUS(wait_status_) : -1;
}

std::string Subprocess::ExitDescription() const {
  if (!exited_) return "running";
  if (WIFEXITED(wait_status_)) return StrCat("exited with code ", WEXITSTATUS(wait_status_));
  if (WIFSIGNALED(wait_status_)) {
    return StrCat("killed by signal ", WTERMSIG(wait_status_), " (",
                  strsignal(WTERMSIG(wait_status_)), ")");
  }
  return "stopped";
}

std::string Subprocess::StderrTail() const {
  std::string tail = stderr_tail_.size() > kStderrTailBytes
                         ? stderr_tail_.substr(stderr_tail_.size() - kStderrTailBytes)
                         : stderr_tail_;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  return tail;
}

}  // namespace flywheel
