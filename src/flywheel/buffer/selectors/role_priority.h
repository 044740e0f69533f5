// Role priority (QwenGyre): main > main-summary > sub-agent > sub-agent-summary. Sample()
// returns the oldest item of the highest-priority role that has one; FIFO within a role.
#ifndef FLYWHEEL_BUFFER_SELECTORS_ROLE_PRIORITY_H_
#define FLYWHEEL_BUFFER_SELECTORS_ROLE_PRIORITY_H_

#include <array>

#include "absl/container/flat_hash_map.h"
#include "flywheel/buffer/selectors/fifo.h"

namespace flywheel {

class RolePrioritySelector : public ItemSelector {
 public:
  void Insert(uint64_t key, const SelectorItemInfo& info) override;
  void Delete(uint64_t key) override;
  KeyWithProbability Sample() override;
  int64_t size() const override { return static_cast<int64_t>(role_of_.size()); }
  std::string DebugString() const override;

 private:
  static constexpr int kNumRoles = 4;
  std::array<FifoSelector, kNumRoles> by_role_;  // index = static_cast<int>(Role)
  absl::flat_hash_map<uint64_t, int> role_of_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_SELECTORS_ROLE_PRIORITY_H_
