// When and what `flywheel chaos` breaks: a sequence of faults drawn from one seed. The gaps
// between faults are exponential (a Poisson process, so faults land at any phase of the job:
// during a checkpoint, a restart, a sync); each fault is, by weight,
//
//   kill     SIGKILL a process, then start it again (the buffer on the same directory and
//            address, the learner with --resume, an actor fresh)
//   freeze   SIGSTOP a process for a few seconds, then SIGCONT (a stalled machine, a GC pause)
//   delay    the proxy between actors and buffer holds every chunk for some milliseconds
//   refuse   the proxy refuses new connections for a while
//   cut      the proxy holds traffic for 200 ms, then resets every open connection (what was
//            in flight is lost: acknowledgements of inserts the buffer committed among it)
//
// The caller says which processes may be killed or frozen at the moment (the learner only once
// it has a checkpoint to resume from). Not thread-safe.
#ifndef FLYWHEEL_CHAOS_FAULT_SCHEDULE_H_
#define FLYWHEEL_CHAOS_FAULT_SCHEDULE_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace flywheel::chaos {

struct FaultScheduleOptions {
  absl::Duration mean_gap = absl::Seconds(10);  // between two faults, on average
  double kill_weight = 0.55;
  double freeze_weight = 0.15;
  double delay_weight = 0.1;
  double refuse_weight = 0.1;
  double cut_weight = 0.1;
  absl::Duration min_freeze = absl::Seconds(1), max_freeze = absl::Seconds(5);
  absl::Duration min_proxy_fault = absl::Seconds(1), max_proxy_fault = absl::Seconds(5);
  absl::Duration min_delay = absl::Milliseconds(20), max_delay = absl::Milliseconds(400);
  absl::Duration max_restart_pause = absl::Seconds(1);  // a killed process stays down this long
};

struct Fault {
  enum class Kind { kKill, kFreeze, kDelay, kRefuse, kCut };
  Kind kind = Kind::kKill;
  std::string target;       // kill, freeze: the process
  absl::Duration duration;  // freeze, delay, refuse: how long; kill: the pause before restart
  absl::Duration delay;     // delay: per chunk

  std::string DebugString() const;
};

const char* FaultKindName(Fault::Kind kind);

class FaultSchedule {
 public:
  FaultSchedule(uint64_t seed, const FaultScheduleOptions& options)
      : rng_(seed), options_(options) {}

  // Time from one fault to the next.
  absl::Duration NextGap();
  // The next fault; kill and freeze pick among `targets` (with none, a proxy fault instead).
  Fault Next(const std::vector<std::string>& targets);

 private:
  absl::Duration Uniform(absl::Duration lo, absl::Duration hi);

  std::mt19937_64 rng_;
  const FaultScheduleOptions options_;
};

}  // namespace flywheel::chaos

#endif  // FLYWHEEL_CHAOS_FAULT_SCHEDULE_H_
