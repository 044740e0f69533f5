#include "flywheel/buffer/selectors/role_priority.h"

#include "absl/base/internal/raw_logging.h"
#include "flywheel/core/strings.h"

namespace flywheel {

void RolePrioritySelector::Insert(uint64_t key, const SelectorItemInfo& info) {
  int role = static_cast<int>(info.role);
  if (role < 0 || role >= kNumRoles) role = kNumRoles - 1;  // unknown roles rank last
  role_of_[key] = role;
  by_role_[role].Insert(key, info);
}

void RolePrioritySelector::Delete(uint64_t key) {
  auto it = role_of_.find(key);
  ABSL_RAW_CHECK(it != role_of_.end(), "RolePrioritySelector::Delete: unknown key ");
  by_role_[it->second].Delete(key);
  role_of_.erase(it);
}

ItemSelector::KeyWithProbability RolePrioritySelector::Sample() {
  for (auto& fifo : by_role_) {
    if (fifo.size() > 0) return fifo.Sample();
  }
  ABSL_RAW_CHECK(false, "RolePrioritySelector::Sample on an empty selector");
  return {};
}

std::string RolePrioritySelector::DebugString() const {
  return StrCat("RolePrioritySelector(main=", by_role_[0].size(),
                ", main_summary=", by_role_[1].size(), ", sub_agent=", by_role_[2].size(),
                ", sub_agent_summary=", by_role_[3].size(), ")");
}

}  // namespace flywheel
