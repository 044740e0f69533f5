// Seeded task instances for group sampling: each instance is handed out G times in a row
// (rollouts 0..G-1 of one group share its seed), so group-normalised advantages compare
// rollouts of the same problem. Thread-safe.
#ifndef FLYWHEEL_ENV_TASK_SOURCE_H_
#define FLYWHEEL_ENV_TASK_SOURCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/env/interface.h"

namespace flywheel {

// SplitMix64: a well-mixed 64-bit value from a counter, for deriving independent seeds.
uint64_t MixSeed(uint64_t x);

class TaskSource {
 public:
  TaskSource(std::string task, uint64_t seed, int64_t group_size);

  // The next rollout: the same instance `group_size` times, then the next instance.
  TaskInstance Next();
  // A whole group at once (the G rollouts of the next instance).
  std::vector<TaskInstance> NextGroup();

  int64_t group_size() const { return group_size_; }
  // Rollouts handed out so far (Next counts one, NextGroup group_size): shared by several
  // actors, the episodes they have dispatched.
  int64_t handed_out() const;

 private:
  TaskInstance Make(int64_t group, int64_t rollout) const;

  const std::string task_;
  const uint64_t seed_;
  const int64_t group_size_;
  mutable absl::Mutex mu_;
  int64_t next_ ABSL_GUARDED_BY(mu_) = 0;  // index of the next rollout
  int64_t handed_out_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_TASK_SOURCE_H_
