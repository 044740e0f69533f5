// Where the learner's wall time goes, per step and cumulative: waiting for data versus the work
// that uses the accelerator (forward, backward, optimiser), and the rest (packing, checkpoints,
// publishing). Utilisation = (forward + backward + optimiser) / total.
//
//   UtilisationTracker tracker;
//   { auto t = tracker.Time(Phase::kWaitData); batch = buffer.Sample(...); }
//   { auto t = tracker.Time(Phase::kForward); ... }
//   PhaseTimes step = tracker.EndStep();
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
    Scope(UtilisationTracker* tracker, Phase phase)
        : tracker_(tracker), phase_(phase), start_(tracker->clock_->Now()) {}
    ~Scope() { tracker_->Add(phase_, tracker_->clock_->Now() - start_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    UtilisationTracker* tracker_;
    Phase phase_;
    absl::Time start_;
  };

  explicit UtilisationTracker(Clock* clock = RealClock()) : clock_(clock) {}

  [[nodiscard]] Scope Time(Phase phase) { return Scope(this, phase); }
  void Add(Phase phase, absl::Duration duration);
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
