#include "flywheel/env/task_source.h"

#include <algorithm>

namespace flywheel {

uint64_t MixSeed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

TaskSource::TaskSource(std::string task, uint64_t seed, int64_t group_size)
    : task_(std::move(task)), seed_(seed), group_size_(std::max<int64_t>(1, group_size)) {}

TaskInstance TaskSource::Make(int64_t group, int64_t rollout) const {
  return TaskInstance{task_, MixSeed(seed_ ^ MixSeed(static_cast<uint64_t>(group))), group,
                      rollout};
}

TaskInstance TaskSource::Next() {
  absl::MutexLock lock(&mu_);
  const int64_t n = next_++;
  ++handed_out_;
  return Make(n / group_size_, n % group_size_);
}

std::vector<TaskInstance> TaskSource::NextGroup() {
  absl::MutexLock lock(&mu_);
  // Skip the rest of a partly handed-out group so the returned group is whole.
  if (next_ % group_size_ != 0) next_ += group_size_ - next_ % group_size_;
  const int64_t group = next_ / group_size_;
  next_ += group_size_;
  handed_out_ += group_size_;
  std::vector<TaskInstance> out;
  for (int64_t r = 0; r < group_size_; ++r) out.push_back(Make(group, r));
  return out;
}

int64_t TaskSource::handed_out() const {
  absl::MutexLock lock(&mu_);
  return handed_out_;
}

}  // namespace flywheel
