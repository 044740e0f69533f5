// Holds the trajectories of a group (same group_id: one task instance rolled out G times)
// until they can be released together, because group-normalised advantages (GRPO) need the
// whole group:
//
//   member arrives ─▶ pending[group_id] ── G members? ──────────────▶ released (complete)
//                                      └─ straggler deadline passed:
//                                           ≥ min_group_size ─────▶ released (partial)
//                                           fewer ────────────────▶ discarded (counted)
//   member of a group already released or discarded ─────────────▶ discarded (late, counted)
//
// A trajectory without a group id is a group of one. Not thread-safe: the Buffer serialises it.
#ifndef FLYWHEEL_BUFFER_GROUP_ASSEMBLER_H_
#define FLYWHEEL_BUFFER_GROUP_ASSEMBLER_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "flywheel/buffer/item.h"

namespace flywheel {

class GroupAssembler {
 public:
  // Group ids remembered after release, to recognise late members.
  static constexpr size_t kRememberedGroups = 1 << 16;

  GroupAssembler(int64_t group_size, int64_t min_group_size, absl::Duration straggler_timeout)
      : group_size_(group_size),
        min_group_size_(min_group_size),
        straggler_timeout_(straggler_timeout) {}

  struct Output {
    std::vector<std::vector<ItemMember>> released;  // each a group, in arrival order
    std::vector<ItemMember> discarded_late;         // member of a closed group
    std::vector<ItemMember> discarded_incomplete;   // group below min_group_size at deadline
    bool empty() const {
      return released.empty() && discarded_late.empty() && discarded_incomplete.empty();
    }
  };

  void Add(ItemMember member, absl::Time now, Output* out);
  // Releases or discards every group whose straggler deadline is <= now.
  void Expire(absl::Time now, Output* out);
  // Discards every pending group whatever its size (a colocated step that over-sampled ends its
  // unfinished groups); their late members are discarded as late.
  void DiscardPending(Output* out);
  // Removes and returns the pending members whose trajectory id is in `ids` (a scan: for the
  // rare acknowledgement of a member that is pending again after a restart).
  std::vector<ItemMember> TakePending(const absl::flat_hash_set<std::string>& ids);

  int64_t pending_groups() const { return static_cast<int64_t>(pending_.size()); }
  int64_t pending_members() const { return pending_members_; }
  absl::Time next_deadline() const;

 private:
  struct Pending {
    std::vector<ItemMember> members;
    absl::Time deadline;
  };
  void Close(const std::string& group_id);

  const int64_t group_size_;
  const int64_t min_group_size_;
  const absl::Duration straggler_timeout_;
  absl::flat_hash_map<std::string, Pending> pending_;
  int64_t pending_members_ = 0;
  absl::flat_hash_set<std::string> closed_;
  std::deque<std::string> closed_order_;  // oldest first, to bound closed_
};

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_GROUP_ASSEMBLER_H_
