#include "flywheel/scheduler/remaining_tokens.h"

#include <algorithm>

namespace flywheel::scheduler {

RemainingTokens::RemainingTokens(int64_t window, double prior)
    : window_(static_cast<size_t>(std::max<int64_t>(1, window))), prior_(std::max(1.0, prior)) {}

void RemainingTokens::Observe(int64_t tokens) {
  absl::MutexLock lock(&mu_);
  lengths_.push_back(std::max<int64_t>(0, tokens));
  if (lengths_.size() > window_) lengths_.pop_front();
  ++observed_;
}

int64_t RemainingTokens::observed() const {
  absl::MutexLock lock(&mu_);
  return observed_;
}

double RemainingTokens::RemainingLocked(int64_t generated) const {
  const double g = static_cast<double>(std::max<int64_t>(0, generated));
  if (lengths_.empty()) return std::max(prior_, g);
  double residual = 0;
  int64_t longer = 0;
  for (const int64_t length : lengths_) {
    if (length <= generated) continue;
    residual += static_cast<double>(length) - g;
    ++longer;
  }
  if (longer == 0) return std::max(1.0, g);
  return residual / static_cast<double>(longer);
}

double RemainingTokens::Remaining(int64_t generated) const {
  absl::MutexLock lock(&mu_);
  return RemainingLocked(generated);
}

double RemainingTokens::Remaining(std::span<const int64_t> generated) const {
  absl::MutexLock lock(&mu_);
  double total = 0;
  for (const int64_t g : generated) total += RemainingLocked(g);
  return total;
}

}  // namespace flywheel::scheduler
