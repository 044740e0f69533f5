// Which paths of an execution to train on: by role priority
// (main > main-summary > sub-agent > sub-agent-summary), earliest first within a role, at most
// `j_max` per execution (0 = all). The choice is returned so it can be logged and counted.
#ifndef FLYWHEEL_TRAJECTORY_PATH_SELECTION_H_
#define FLYWHEEL_TRAJECTORY_PATH_SELECTION_H_

#include <array>
#include <string>
#include <vector>

#include "flywheel/trajectory/trajectory_tree.h"

namespace flywheel {

struct PathSelection {
  std::vector<TreePath> selected;  // in priority order
  std::vector<TreePath> dropped;
  std::array<int, 4> selected_per_role{};  // indexed by Role
  std::array<int, 4> dropped_per_role{};

  std::string DebugString() const;
};

PathSelection SelectPaths(std::vector<TreePath> paths, int j_max);

}  // namespace flywheel

#endif  // FLYWHEEL_TRAJECTORY_PATH_SELECTION_H_
