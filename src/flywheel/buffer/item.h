// What the table holds: one trajectory, or a whole group released together. Payloads are
// shared, never copied: a producer, the table, the durable store's writer and every consumer of
// a sample all point at the same immutable Trajectory (and, from the service, the same wire
// bytes, so sampling over gRPC does not re-serialise).
#ifndef FLYWHEEL_BUFFER_ITEM_H_
#define FLYWHEEL_BUFFER_ITEM_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "absl/container/inlined_vector.h"
#include "flywheel/core/trajectory.h"

namespace flywheel {

struct ItemMember {
  std::shared_ptr<const Trajectory> trajectory;
  // Serialized v1.Trajectory, when known. Never modified while shared; not const so that the
  // last holder (the consumer of an item the table let go) may take the bytes, not copy them.
  std::shared_ptr<std::string> wire;
  uint64_t storage_key = 0;                 // key in the durable store; 0 = not stored
};

struct Item {
  uint64_t key = 0;  // assigned by the table, increasing with insertion order
  absl::InlinedVector<ItemMember, 1> members;
  double priority = 1.0;
  Role role = Role::kMain;
  int64_t min_version = kNoVersion;  // over all members' generated tokens
  int64_t max_version = kNoVersion;
  int64_t times_sampled = 0;
  int64_t inserted_unix_ns = 0;

  // Fills role and version bounds from the members.
  void Summarize();
};

using ItemPtr = std::shared_ptr<Item>;

// One sampled item as handed to the consumer. `item` is shared with the table (read-only).
struct SampledItem {
  std::shared_ptr<const Item> item;
  int64_t times_sampled = 0;  // including this sample
  double probability = 1.0;   // of being picked by the selector at that moment
  int64_t lag = 0;            // learner_version - min_version when sampled
};

// Min and max policy version over the generated tokens (those with a version), in one
// branch-free pass that the compiler vectorises: an insert of a 64 KiB trajectory should not
// cost more than its bookkeeping.
inline void VersionBounds(const Trajectory& t, int64_t* lo, int64_t* hi) {
  int64_t min_v = std::numeric_limits<int64_t>::max();
  int64_t max_v = kNoVersion;
  const int64_t* v = t.versions.data();
  const size_t n = t.versions.size();
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = v[i];
    min_v = std::min(min_v, x < 0 ? std::numeric_limits<int64_t>::max() : x);
    max_v = std::max(max_v, x);
  }
  *lo = min_v == std::numeric_limits<int64_t>::max() ? kNoVersion : min_v;
  *hi = max_v < 0 ? kNoVersion : max_v;
}

inline void Item::Summarize() {
  min_version = kNoVersion;
  max_version = kNoVersion;
  bool first = true;
  for (const ItemMember& m : members) {
    if (first || static_cast<int>(m.trajectory->role) < static_cast<int>(role)) {
      role = m.trajectory->role;
    }
    first = false;
    int64_t lo = kNoVersion;
    int64_t hi = kNoVersion;
    VersionBounds(*m.trajectory, &lo, &hi);
    if (lo != kNoVersion && (min_version == kNoVersion || lo < min_version)) min_version = lo;
    if (hi > max_version) max_version = hi;
  }
}

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_ITEM_H_
