// For tests that wait for another thread or process: poll a condition until a deadline instead
// of sleeping a fixed time, so that a slow machine makes the test wait longer, not pass without
// the condition or fail by chance.
#ifndef FLYWHEEL_CORE_WAIT_FOR_H_
#define FLYWHEEL_CORE_WAIT_FOR_H_

#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace flywheel {

// True once `condition` holds, false if it still does not after `timeout`.
inline bool WaitFor(const std::function<bool()>& condition,
                    absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > deadline) return condition();
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

}  // namespace flywheel

#endif  // FLYWHEEL_CORE_WAIT_FOR_H_
