#include "flywheel/elastic/training_meter.h"

#include <algorithm>

namespace flywheel {

void TrainingMeter::Sampled(int64_t episodes, int64_t tokens) {
  absl::MutexLock lock(&mu_);
  sampled_episodes_ += episodes;
  sampled_tokens_ += tokens;
}

void TrainingMeter::StepDone(const MeteredStep& step) {
  if (step.micro_steps <= 0) return;  // nothing trained
  {
    absl::MutexLock lock(&mu_);
    micro_steps_ = scheduler::AverageMicroSteps(micro_steps_, step.micro_steps);
  }
  if (step.cell_micro_steps <= 0) return;  // nothing the core ran
  const double units =
      static_cast<double>(unit_ == scheduler::WorkUnit::kTokens ? step.tokens : step.episodes);
  // The core's share of the step's units: micro-steps are of about equal size (one token
  // budget each).
  const double core_units = units * step.cell_micro_steps / step.micro_steps;
  if (core_units <= 0) return;
  absl::MutexLock lock(&mu_);
  seconds_ = (1 - kSmoothing) * seconds_ + step.compute_seconds;
  units_ = (1 - kSmoothing) * units_ + core_units;
}

scheduler::TrainingReport TrainingMeter::Report(int64_t waiting_episodes,
                                                const RunningStep& running) const {
  absl::MutexLock lock(&mu_);
  const double waiting = static_cast<double>(std::max<int64_t>(0, waiting_episodes));
  // The share of the step packed and not run yet (micro-steps are of about equal size).
  const double untrained =
      running.micro_steps > 0
          ? 1 - static_cast<double>(std::min(running.done, running.micro_steps)) /
                    running.micro_steps
          : 0;
  scheduler::TrainingReport report;
  if (unit_ == scheduler::WorkUnit::kTokens) {
    const double per_episode =
        sampled_episodes_ > 0 ? static_cast<double>(sampled_tokens_) / sampled_episodes_ : 0;
    report.backlog = waiting * per_episode + untrained * static_cast<double>(running.tokens);
    report.batch = static_cast<double>(batch_episodes_) * per_episode;
  } else {
    report.backlog = waiting + untrained * static_cast<double>(running.episodes);
    report.batch = static_cast<double>(batch_episodes_);
  }
  report.train_seconds_per_unit = units_ > 0 ? seconds_ / units_ : 0;
  report.micro_steps = micro_steps_;
  return report;
}

}  // namespace flywheel
