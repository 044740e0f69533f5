// When a training job ends before run.max_steps: run.max_wall_seconds after it started, or when a
// stop is requested (SIGINT / SIGTERM, through the command line's StopSignals).
//
// Every wait of a job's main loop (a batch that does not come, actors generating a colocated batch,
// a harness execution) checks it at least every few hundred milliseconds, and stopping interrupts
// environment calls in flight (EnvFactory::Interrupt), so a job ends within kStopBound of its
// budget or signal whatever its actors and environments are doing: a hung environment process, a
// full buffer, a learner waiting for data. A learner step in progress finishes first; keep steps
// short next to the bound.
#ifndef FLYWHEEL_RUNTIME_RUN_STOP_H_
#define FLYWHEEL_RUNTIME_RUN_STOP_H_

#include <atomic>
#include <string_view>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace flywheel {

// What the documentation promises: from the budget's end or the signal to the process's exit,
// summary written, on the built-in configurations.
inline constexpr absl::Duration kStopBound = absl::Seconds(5);

class RunStop {
 public:
  // `requested` is borrowed and may be null; max_wall_seconds <= 0 is no limit.
  RunStop(double max_wall_seconds, const std::atomic<bool>* requested,
          absl::Time start = absl::Now())
      : requested_(requested),
        deadline_(max_wall_seconds > 0
                      ? start + absl::Milliseconds(static_cast<int64_t>(max_wall_seconds * 1000))
                      : absl::InfiniteFuture()) {}

  bool Reached() const { return !Reason().empty(); }
  // "signal", "max_wall_seconds", or empty while the job may go on.
  std::string_view Reason() const {
    if (requested_ != nullptr && requested_->load()) return "signal";
    if (absl::Now() >= deadline_) return "max_wall_seconds";
    return {};
  }

 private:
  const std::atomic<bool>* requested_;
  const absl::Time deadline_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_RUN_STOP_H_
