// The remote learner's side of the buffer's leases (buffer.h, docs/reliability.md): which
// trajectories it holds (sampled, not yet acknowledged), which of those it has consumed
// (trained or dropped) and owes the buffer an acknowledgement for, and the record of them that
// each checkpoint keeps.
//
//   sampled ─Admit─▶ in hand ─Consume (after a step)─▶ pending ─(checkpoint, then ack)─▶ gone
//   sampled while held already (the buffer restarted and handed it out again): skipped
//
// A pending trajectory is acknowledged only once a checkpoint that contains its step is
// complete: a learner killed before that resumes from an older checkpoint, without those
// steps, and the buffer must then still have their trajectories to deliver again. Each
// checkpoint writes the pending list (leases.json), so that a kill between a checkpoint and its
// acknowledgement does not deliver again what the checkpoint has trained on.
//
// Not thread-safe: the learner's thread owns it.
#ifndef FLYWHEEL_RUNTIME_LEARNER_LEASES_H_
#define FLYWHEEL_RUNTIME_LEARNER_LEASES_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "flywheel/core/trajectory.h"

namespace flywheel {

class LearnerLeases {
 public:
  static constexpr const char* kCheckpointFile = "leases.json";

  struct Consumed {
    std::string id;
    std::string reason;  // "trained", "learner_stale", "learner_too_long", …
  };

  // Removes from `groups` every trajectory held already (and groups left empty); returns how
  // many were removed. The rest are held from now on.
  int64_t Admit(std::vector<std::vector<Trajectory>>& groups);
  // Trajectories a step trained or dropped: pending until acknowledged.
  void Consume(const std::vector<std::string>& ids, std::string_view reason);
  // Pending acknowledgements, oldest first.
  const std::vector<Consumed>& pending() const { return pending_; }
  // The first `count` pending are in a complete checkpoint: they may be acknowledged.
  void Checkpointed(size_t count) { acknowledgeable_ = std::max(acknowledgeable_, count); }
  // How many of the first pending a complete checkpoint holds.
  size_t acknowledgeable() const { return acknowledgeable_; }
  // The buffer acknowledged the first `count` pending (count <= acknowledgeable()): forgotten.
  void Acknowledged(size_t count);
  // Every id held, in hand or pending (what a release of the other leases must keep).
  const absl::flat_hash_set<std::string>& held() const { return held_; }

  // The pending list as a checkpoint keeps it (`dir`/leases.json; the checkpoint syncs it).
  absl::Status Write(const std::string& dir) const;
  // Restores the pending list of the checkpoint in `dir` (none there: nothing pending); all of
  // it acknowledgeable.
  absl::Status Read(const std::string& dir);

 private:
  absl::flat_hash_set<std::string> held_;
  std::vector<Consumed> pending_;
  size_t acknowledgeable_ = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_LEARNER_LEASES_H_
