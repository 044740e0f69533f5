// Where the learner's wall time goes, per step and cumulative: waiting for data versus the work
// that uses the accelerator (forward, backward, optimiser), and the rest (packing, checkpoints,
// publishing). Utilisation = (forward + backward + optimiser) / total.
//
//   UtilisationTracker tracker;
//   { auto t = tracker.Time(Phase::kWaitData); batch = buffer.Sample(...); }
//   { auto t = tracker.Time(Phase::kForward); ... }
//   PhaseTimes step = tracker.EndStep();
//
// With run.trace on, each scope is also a span of the thread's "learner" track, named after its
// phase (or `trace_name`) and as long as the time it adds, so that the trace's busy time is the
// one reported here.
//
// On a GPU, kernels run asynchronously: the caller synchronises the device before a scope ends
// for the split between phases to be meaningful. Not thread-safe: the learner thread owns it.
#ifndef FLYWHEEL_LEARNER_UTILISATION_H_
#define FLYWHEEL_LEARNER_UTILISATION_H_

#include <array>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/time/time.h"
#include "flywheel/core/clock.h"
#include "flywheel/observe/trace_recorder.h"

namespace flywheel {

enum class Phase { kWaitData = 0, kForward, kBackward, kOptimizer, kOther };
inline constexpr int kNumPhases = 5;
const char* PhaseName(Phase phase);

struct PhaseTimes {
  std::array<double, kNumPhases> seconds{};
  int64_t steps = 0;

  double operator[](Phase p) const { return seconds[static_cast<int>(p)]; }
  double total() const;
  double compute() const;      // forward + backward + optimiser
  double utilisation() const;  // compute / total; 0 when nothing was timed
  void Add(const PhaseTimes& other);
  nlohmann::json ToJson() const;
  std::string DebugString() const;
};

class UtilisationTracker {
 public:
  class Scope {
   public:
    Scope(UtilisationTracker* tracker, Phase phase, const char* trace_name)
        : tracker_(tracker),
          phase_(phase),
          trace_name_(trace_name != nullptr ? trace_name : PhaseName(phase)),
          trace_start_ns_(TraceRecorder::Global().enabled() ? TraceRecorder::NowNanos() : -1),
          start_(tracker->clock_->Now()) {}
    ~Scope() {
      const absl::Duration counted = tracker_->Add(phase_, tracker_->clock_->Now() - start_);
      if (trace_start_ns_ >= 0) {
        TraceRecorder::Global().Record("learner", trace_name_, trace_start_ns_,
                                       trace_start_ns_ + absl::ToInt64Nanoseconds(counted));
      }
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    UtilisationTracker* tracker_;
    Phase phase_;
    const char* trace_name_;
    int64_t trace_start_ns_;  // -1: not traced
    absl::Time start_;
  };

  explicit UtilisationTracker(Clock* clock = RealClock()) : clock_(clock) {}

  // `trace_name` (static storage) names the span when it says more than the phase ("pack").
  [[nodiscard]] Scope Time(Phase phase, const char* trace_name = nullptr) {
    return Scope(this, phase, trace_name);
  }
  // Returns the duration counted (longer than `duration` on an emulated slower device).
  absl::Duration Add(Phase phase, absl::Duration duration);
  // Closes the current step: returns its times, adds them to the cumulative totals and
  // publishes learner.utilisation / learner.seconds{phase=…} gauges.
  PhaseTimes EndStep();

  const PhaseTimes& current() const { return current_; }
  const PhaseTimes& cumulative() const { return cumulative_; }

 private:
  Clock* clock_;
  PhaseTimes current_;
  PhaseTimes cumulative_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_UTILISATION_H_
