#include "flywheel/trajectory/path_selection.h"

#include <algorithm>

#include "flywheel/core/strings.h"

namespace flywheel {

PathSelection SelectPaths(std::vector<TreePath> paths, int j_max) {
  // stable: paths of one role and start time keep their recorded order
  std::stable_sort(paths.begin(), paths.end(), [](const TreePath& a, const TreePath& b) {
    if (a.role != b.role) return a.role < b.role;
    return a.start_unix_ns < b.start_unix_ns;
  });
  PathSelection out;
  for (TreePath& p : paths) {
    const int role = static_cast<int>(p.role);
    if (j_max <= 0 || static_cast<int>(out.selected.size()) < j_max) {
      ++out.selected_per_role[role];
      out.selected.push_back(std::move(p));
    } else {
      ++out.dropped_per_role[role];
      out.dropped.push_back(std::move(p));
    }
  }
  return out;
}

std::string PathSelection::DebugString() const {
  std::string out = StrCat("selected ", selected.size(), " dropped ", dropped.size(), " (");
  for (int r = 0; r < 4; ++r) {
    out += StrCat(r == 0 ? "" : ", ", RoleName(static_cast<Role>(r)), " ", selected_per_role[r],
                  "/", selected_per_role[r] + dropped_per_role[r]);
  }
  return out + ")";
}

}  // namespace flywheel
