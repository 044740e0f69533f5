#include "flywheel/learner/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace flywheel {

double LrSchedule::At(int64_t step) const {
  if (step < warmup_steps) {
    return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  const double p = std::clamp(static_cast<double>(step - warmup_steps) / span, 0.0, 1.0);
  return lr * (min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + std::cos(std::numbers::pi * p)));
}

}  // namespace flywheel
