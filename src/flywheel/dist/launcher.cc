#include "flywheel/dist/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/time/clock.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/dist/rendezvous.h"

extern char** environ;

namespace flywheel::dist {
namespace {

// The write end of the self-pipe that the signal handler feeds; -1 outside Launch.
volatile sig_atomic_t g_signal_fd = -1;

void OnSignal(int signal) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signal);
  if (g_signal_fd >= 0) (void)!write(g_signal_fd, &byte, 1);
  errno = saved;
}

// Installs the handlers for the duration of Launch and restores the previous ones.
class SignalPipe {
 public:
  absl::Status Open() {
    if (pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
      return absl::InternalError(StrCat("launch: pipe: ", std::strerror(errno)));
    }
    g_signal_fd = fds_[1];
    struct sigaction action = {};
    action.sa_handler = &OnSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (int i = 0; i < kCount; ++i) sigaction(kSignals[i], &action, &previous_[i]);
    return absl::OkStatus();
  }
  ~SignalPipe() {
    if (fds_[0] < 0) return;
    for (int i = 0; i < kCount; ++i) sigaction(kSignals[i], &previous_[i], nullptr);
    g_signal_fd = -1;
    close(fds_[0]);
    close(fds_[1]);
  }
  int read_fd() const { return fds_[0]; }

 private:
  static constexpr int kCount = 3;
  static constexpr int kSignals[kCount] = {SIGINT, SIGTERM, SIGCHLD};
  int fds_[2] = {-1, -1};
  struct sigaction previous_[kCount] = {};
};

absl::Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(StrCat("launch: writing output: ", std::strerror(errno)));
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// One output stream of one rank: a pipe, and the part of a line read so far.
struct Stream {
  int fd = -1;      // read end; -1 once closed
  int out_fd = -1;  // where its prefixed lines go
  std::string partial;
};

struct Child {
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream out;
  Stream err;
};

// Reads what is there; writes every complete line with the prefix. At EOF, the last partial
// line too, and closes the pipe.
void Pump(Stream& stream, const std::string& prefix) {
  char buffer[65536];
  while (stream.fd >= 0) {
    const ssize_t n = read(stream.fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // EAGAIN: nothing more for now
    if (n == 0) {
      if (!stream.partial.empty()) (void)WriteAll(stream.out_fd, prefix + stream.partial + "\n");
      stream.partial.clear();
      close(stream.fd);
      stream.fd = -1;
      return;
    }
    stream.partial.append(buffer, static_cast<size_t>(n));
    std::string lines;
    size_t start = 0;
    for (size_t nl; (nl = stream.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
      lines += prefix;
      lines.append(stream.partial, start, nl + 1 - start);
    }
    stream.partial.erase(0, start);
    if (!lines.empty()) (void)WriteAll(stream.out_fd, lines);
  }
}

int ExitCode(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

std::string DescribeExit(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    return StrCat("was killed by signal ", WTERMSIG(wait_status), " (",
                  strsignal(WTERMSIG(wait_status)), ")");
  }
  return StrCat("exited with code ", ExitCode(wait_status));
}

// The environment of every rank: this process's, with torchrun's variables set.
std::vector<std::string> RankEnvironment(int rank, int nproc, const std::string& host, int port) {
  const std::vector<std::pair<std::string, std::string>> vars = {
      {"RANK", StrCat(rank)},       {"WORLD_SIZE", StrCat(nproc)},
      {"LOCAL_RANK", StrCat(rank)}, {"LOCAL_WORLD_SIZE", StrCat(nproc)},
      {"MASTER_ADDR", host},        {"MASTER_PORT", StrCat(port)}};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    bool replaced = false;
    for (const auto& [name, value] : vars) {
      replaced = replaced || (entry.size() > name.size() && entry.substr(0, name.size()) == name &&
                              entry[name.size()] == '=');
    }
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : vars) env.push_back(StrCat(name, "=", value));
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The program to exec: /proc/self/exe resolved now, so that argv[0] is the binary's path.
std::string ResolveProgram(const std::string& program) {
  if (program != "/proc/self/exe") return program;
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return program;
  return std::string(path, static_cast<size_t>(n));
}

absl::Status Spawn(const std::string& program, std::vector<std::string> argv,
                   std::vector<std::string> env, Child& child) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0)
    return absl::InternalError(StrCat("launch: pipe: ", strerror(errno)));
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return absl::InternalError(StrCat("launch: pipe: ", strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Own process group (pgid = pid), default dispositions and an empty mask for the signals the
  // launcher handles, whatever this process has.
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t defaults, empty;
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGHUP}) sigaddset(&defaults, s);
  sigemptyset(&empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &empty);
  std::vector<char*> argp = Pointers(argv);
  std::vector<char*> envp = Pointers(env);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, program.c_str(), &actions, &attr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(out[0]);
    close(err[0]);
    return absl::FailedPreconditionError(
        StrCat("launch: cannot start '", program, "': ", std::strerror(rc)));
  }
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  child.pid = pid;
  child.running = true;
  child.out.fd = out[0];
  child.err.fd = err[0];
  return absl::OkStatus();
}

void SignalRunning(std::vector<Child>& children, int signal) {
  for (Child& c : children) {
    if (c.running) kill(-c.pid, signal);  // its process group: the rank and what it started
  }
}

}  // namespace

absl::Status LaunchOptions::Validate() const {
  if (nproc < 1) {
    return absl::InvalidArgumentError(StrCat("launch: --nproc must be >= 1, got ", nproc));
  }
  if (args.empty() && program == "/proc/self/exe") {
    return absl::InvalidArgumentError(
        "launch: no command to run: give one after '--', e.g. flywheel launch --nproc 2 -- learner "
        "job.toml");
  }
  if (grace_period < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("launch: the grace period must be >= 0");
  }
  if (!rendezvous.empty()) {
    std::string host;
    int port = 0;
    RETURN_IF_ERROR(ParseHostPort(rendezvous, &host, &port, "rendezvous address"));
    if (port == 0) {
      return absl::InvalidArgumentError(
          StrCat("launch: --rendezvous ", rendezvous, ": the ranks need a real port, not 0"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> RankArgs(const LaunchOptions& options, int rank,
                                  const std::string& rendezvous) {
  std::vector<std::string> args = options.args;
  if (options.append_rank_flags) {
    args.insert(args.end(), {"--world-size", StrCat(options.nproc), "--rank", StrCat(rank),
                             "--rendezvous", rendezvous});
  }
  return args;
}

absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  LaunchResult result;
  std::string host = "127.0.0.1";
  int port = 0;
  if (options.rendezvous.empty()) {
    ASSIGN_OR_RETURN(port, PickFreePort(host));
  } else {
    RETURN_IF_ERROR(ParseHostPort(options.rendezvous, &host, &port, "rendezvous address"));
  }
  result.rendezvous =
      host.find(':') != std::string::npos ? StrCat("[", host, "]:", port) : StrCat(host, ":", port);
  const std::string program = ResolveProgram(options.program);

  SignalPipe signals;
  RETURN_IF_ERROR(signals.Open());
  std::vector<Child> children(static_cast<size_t>(options.nproc));
  for (int rank = 0; rank < options.nproc; ++rank) {
    Child& child = children[rank];
    child.out.out_fd = options.stdout_fd;
    child.err.out_fd = options.stderr_fd;
    std::vector<std::string> argv = {program};
    for (std::string& a : RankArgs(options, rank, result.rendezvous)) argv.push_back(std::move(a));
    absl::Status spawned =
        Spawn(program, std::move(argv), RankEnvironment(rank, options.nproc, host, port), child);
    if (!spawned.ok()) {
      SignalRunning(children, SIGKILL);
      for (Child& c : children) {
        if (c.running) waitpid(c.pid, nullptr, 0);
        for (Stream* s : {&c.out, &c.err}) {
          if (s->fd >= 0) close(s->fd);
        }
      }
      return Annotate(spawned, StrCat("rank ", rank));
    }
  }

  int running = options.nproc;
  std::optional<absl::Time> kill_at;   // SIGKILL what still runs then
  std::optional<absl::Time> drain_by;  // all ranks exited: stop reading pipes then
  const auto note = [&](const std::string& text) {
    (void)WriteAll(options.stderr_fd, StrCat("flywheel launch: ", text, "\n"));
  };
  while (true) {
    // Reap: SIGCHLD woke us, or may have been coalesced with another.
    for (int rank = 0; rank < options.nproc; ++rank) {
      Child& c = children[rank];
      if (!c.running || waitpid(c.pid, &c.status, WNOHANG) != c.pid) continue;
      c.running = false;
      --running;
      if (ExitCode(c.status) != 0 && result.first_failed_rank < 0) {
        result.first_failed_rank = rank;
        result.exit_code = ExitCode(c.status);
        if (running > 0) {
          note(StrCat("rank ", rank, " ", DescribeExit(c.status), "; stopping the other ranks ",
                      "(SIGTERM, then SIGKILL after ", absl::ToDoubleSeconds(options.grace_period),
                      " s)"));
          SignalRunning(children, SIGTERM);
          kill_at = absl::Now() + options.grace_period;
        } else {
          note(StrCat("rank ", rank, " ", DescribeExit(c.status)));
        }
      }
    }
    if (kill_at.has_value() && absl::Now() >= *kill_at) {
      SignalRunning(children, SIGKILL);
      kill_at.reset();
    }
    if (running == 0 && !drain_by.has_value()) {
      // A rank's own children may still hold its pipes open; do not wait for them for long.
      drain_by = absl::Now() + absl::Seconds(1);
    }

    std::vector<pollfd> fds = {{signals.read_fd(), POLLIN, 0}};
    std::vector<std::pair<Stream*, int>> streams;  // stream, rank
    for (int rank = 0; rank < options.nproc; ++rank) {
      for (Stream* s : {&children[rank].out, &children[rank].err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        streams.emplace_back(s, rank);
      }
    }
    if (running == 0 && (streams.empty() || absl::Now() >= *drain_by)) break;
    int timeout_ms = -1;
    for (const auto& t : {kill_at, drain_by}) {
      if (!t.has_value()) continue;
      const int ms =
          static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(*t - absl::Now()) + 1));
      timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      return absl::InternalError(StrCat("launch: poll: ", std::strerror(errno)));
    }
    if (fds[0].revents & POLLIN) {
      unsigned char received[64];
      ssize_t n;
      while ((n = read(signals.read_fd(), received, sizeof(received))) > 0) {
        for (ssize_t i = 0; i < n; ++i) {
          if (received[i] == SIGINT || received[i] == SIGTERM) SignalRunning(children, received[i]);
        }
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) {
        Pump(*streams[i - 1].first, StrCat("[rank ", streams[i - 1].second, "] "));
      }
    }
  }
  for (Child& c : children) {
    for (Stream* s : {&c.out, &c.err}) {
      if (s->fd < 0) continue;
      if (!s->partial.empty()) {
        (void)WriteAll(s->out_fd, StrCat("[rank ", &c - children.data(), "] ", s->partial, "\n"));
      }
      close(s->fd);
    }
    result.wait_status.push_back(c.status);
  }
  return result;
}

}  // namespace flywheel::dist
