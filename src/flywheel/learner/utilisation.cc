#include "flywheel/learner/utilisation.h"

#include "flywheel/core/emulated_device.h"
#include "flywheel/core/metrics.h"
#include "flywheel/core/strings.h"

namespace flywheel {

const char* PhaseName(Phase phase) {
  static constexpr const char* kNames[] = {"wait_data", "forward", "backward", "optimizer",
                                           "other"};
  return kNames[static_cast<int>(phase)];
}

double PhaseTimes::total() const {
  double sum = 0;
  for (double s : seconds) sum += s;
  return sum;
}

double PhaseTimes::compute() const {
  return (*this)[Phase::kForward] + (*this)[Phase::kBackward] + (*this)[Phase::kOptimizer];
}

double PhaseTimes::utilisation() const {
  const double t = total();
  return t > 0 ? compute() / t : 0.0;
}

void PhaseTimes::Add(const PhaseTimes& other) {
  for (int i = 0; i < kNumPhases; ++i) seconds[i] += other.seconds[i];
  steps += other.steps;
}

nlohmann::json PhaseTimes::ToJson() const {
  nlohmann::json j = {{"steps", steps}, {"total_s", total()}, {"utilisation", utilisation()}};
  for (int i = 0; i < kNumPhases; ++i) {
    j[StrCat(PhaseName(static_cast<Phase>(i)), "_s")] = seconds[i];
  }
  return j;
}

std::string PhaseTimes::DebugString() const {
  std::string out = fmt::format("steps={} utilisation={:.3f}", steps, utilisation());
  for (int i = 0; i < kNumPhases; ++i) {
    out += fmt::format(" {}={:.4f}s", PhaseName(static_cast<Phase>(i)), seconds[i]);
  }
  return out;
}

absl::Duration UtilisationTracker::Add(Phase phase, absl::Duration duration) {
  // On an emulated slower device the compute phases take f times as long (emulated_device.h).
  const bool compute =
      phase == Phase::kForward || phase == Phase::kBackward || phase == Phase::kOptimizer;
  if (compute) duration = EmulateDeviceTime(duration);
  current_.seconds[static_cast<int>(phase)] += absl::ToDoubleSeconds(duration);
  return duration;
}

PhaseTimes UtilisationTracker::EndStep() {
  PhaseTimes step = current_;
  step.steps = 1;
  cumulative_.Add(step);
  current_ = PhaseTimes();
  MetricsRegistry& registry = MetricsRegistry::Global();
  registry.GetGauge("learner.utilisation", "busy share of the learner's time since the start")
      ->Set(cumulative_.utilisation());
  registry.GetGauge("learner.step_utilisation", "busy share of the learner's last step")
      ->Set(step.utilisation());
  for (int i = 0; i < kNumPhases; ++i) {
    const std::string_view phase = PhaseName(static_cast<Phase>(i));
    registry.GetGauge(StrCat("learner.seconds{phase=", phase, "}"),
                      "learner seconds since the start, by phase")
        ->Set(cumulative_.seconds[i]);
    registry.GetHistogram(StrCat("learner.step_phase_seconds{phase=", phase, "}"), SecondsBounds(),
                          "seconds of one learner step in each phase")
        ->Observe(step.seconds[i]);
  }
  return step;
}

}  // namespace flywheel
