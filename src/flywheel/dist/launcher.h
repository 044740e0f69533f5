// The local launcher, as torchrun on one host: starts `nproc` copies of a command, one per rank,
// and treats them as one job.
//
//   flywheel launch --nproc 2 -- learner job.toml --buffer 127.0.0.1:7300
//     rank 0: flywheel learner job.toml --buffer … --world-size 2 --rank 0 --rendezvous H:P
//     rank 1: flywheel learner job.toml --buffer … --world-size 2 --rank 1 --rendezvous H:P
//
//   launcher ──posix_spawn──▶ rank R (own process group) ──stdout/stderr pipes──▶ launcher
//            ◀─────────── SIGCHLD (self-pipe) ───────────┘     "[rank R] " + line ──▶ stdout/stderr
//
// - Every output line of rank R is written as "[rank R] line", to stdout or stderr as the child
//   wrote it; whole lines in one write, so ranks never interleave within a line.
// - SIGINT and SIGTERM sent to the launcher are forwarded to every rank (each rank runs in its
//   own process group, so a Ctrl-C in the terminal reaches the ranks once, through the launcher,
//   and a rank's own children get it too).
// - When a rank exits non-zero (or dies of a signal), the others get SIGTERM, then SIGKILL after
//   the grace period; the launcher's exit code is that first failing rank's (128 + signal for a
//   signal, as a shell reports it). 0 when every rank exits 0.
// - Each rank also gets torchrun's environment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//   MASTER_ADDR, MASTER_PORT.
//
// One Launch at a time per process: it owns the SIGINT/SIGTERM/SIGCHLD handlers while it runs
// (and restores the previous ones), and it reaps only the children it started.
#ifndef FLYWHEEL_DIST_LAUNCHER_H_
#define FLYWHEEL_DIST_LAUNCHER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace flywheel::dist {

struct LaunchOptions {
  // Ranks to start (torchrun's --nproc-per-node).
  int nproc = 1;
  // HOST:PORT of the rendezvous (rank 0 hosts it); empty: 127.0.0.1 and a free port.
  std::string rendezvous;
  // The program of every rank; the default is the running flywheel binary.
  std::string program = "/proc/self/exe";
  // Its arguments, e.g. {"learner", "job.toml"}.
  std::vector<std::string> args;
  // Appends "--world-size N --rank R --rendezvous HOST:PORT" to args; off for a command that
  // reads the environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) instead.
  bool append_rank_flags = true;
  // After the first failure, how long the other ranks have between SIGTERM and SIGKILL.
  absl::Duration grace_period = absl::Seconds(10);
  // Where the prefixed lines of the ranks' stdout and stderr go (and the launcher's own notes,
  // on stderr_fd).
  int stdout_fd = 1;
  int stderr_fd = 2;

  absl::Status Validate() const;
};

struct LaunchResult {
  // What the launcher exits with: the first failing rank's code, or 0.
  int exit_code = 0;
  // That rank, or -1 when every rank succeeded.
  int first_failed_rank = -1;
  // Each rank's wait status (waitpid), by rank.
  std::vector<int> wait_status;
  // The rendezvous the ranks were given.
  std::string rendezvous;
};

// The arguments of rank `rank`: options.args, then the rank flags if append_rank_flags.
std::vector<std::string> RankArgs(const LaunchOptions& options, int rank,
                                  const std::string& rendezvous);

// Runs the ranks until all have exited. An error only when the launcher itself could not work
// (a bad option, a failed spawn: the ranks already started are killed); a failing rank is a
// LaunchResult with a non-zero exit_code.
absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options);

}  // namespace flywheel::dist

#endif  // FLYWHEEL_DIST_LAUNCHER_H_
