// Membership epochs: the learner's process group re-formed over one store as workers join and
// leave, without restarting the ranks that stay (QwenGyre's streaming training; torchrun's
// elastic agent restarts every worker instead, which this avoids).
//
// Every worker has a global id that never changes (its rendezvous rank, or the scheduler's
// worker id). Epoch e is an ordered member list of global ids; the group of epoch e is a Gloo
// group over a c10d::PrefixStore of the store (keys "epoch/<e>/…") in which a worker's rank is
// its index in the list. Each epoch has fresh keys, so forming epoch e+1 never meets the
// addresses of epoch e.
//
//   coordinator (elastic scheduler)     worker 0        worker 1        worker 2 (joins)
//   ProposeEpoch(1, {0,1})  ─────────▶  AwaitEpoch(1)   AwaitEpoch(1)
//                                       FormGroup(1)    FormGroup(1)
//   ProposeEpoch(2, {0,1,2}) ───────▶   … step of epoch 1 runs …        AwaitEpoch(2)
//                                       AwaitEpoch(2)   AwaitEpoch(2)   FormGroup(2)
//                                       FormGroup(2)    FormGroup(2)
//   ProposeEpoch(3, {0,2})  ─────────▶  … step 2 …      … step 2, then leaves …
//
// The next epoch can be proposed while the current one runs: a proposal is only a store key,
// and the groups of different epochs are independent. An epoch is proposed once: a second,
// different proposal for the same epoch is an error, so joiners and survivors cannot disagree.
// Keys: "epoch/<e>/members" (the list, "0,1,2"), and Gloo's own keys under "epoch/<e>/".
//
// Thread-safety: the methods may be called from any thread. AwaitEpoch blocks its store
// connection while it waits (a TCPStore serialises the calls of one connection), so a
// coordinator that waits should use its own connection (Rendezvous::Connect()).
#ifndef FLYWHEEL_DIST_MEMBERSHIP_H_
#define FLYWHEEL_DIST_MEMBERSHIP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/dist/communicator.h"

namespace flywheel::dist {

struct MembershipOptions {
  // Options of each epoch's group; `name` becomes "<name> epoch <e>".
  CommunicatorOptions group;

  absl::Status Validate() const;
};

class Membership {
 public:
  // `store` is shared by every worker (the rendezvous store); it must outlive this object.
  Membership(c10::intrusive_ptr<c10d::Store> store, MembershipOptions options);

  // Publishes the members of `epoch` (global ids, in rank order, no duplicates). Proposing the
  // same list again is fine; a different list for an epoch already proposed is kAlreadyExists.
  absl::Status ProposeEpoch(int64_t epoch, const std::vector<int>& members);

  // Waits until `epoch` is proposed (or the deadline passes: kDeadlineExceeded) and returns its
  // members.
  absl::StatusOr<std::vector<int>> AwaitEpoch(int64_t epoch, absl::Time deadline);

  // Joins the group of `epoch` as `my_id`: every member must call it (it waits for all of them
  // up to the group timeout). `members` must be the proposed list when one was proposed.
  absl::StatusOr<std::unique_ptr<Communicator>> FormGroup(int64_t epoch,
                                                          const std::vector<int>& members,
                                                          int my_id);

  // The rank of `id` in `members` (its index), or kNotFound.
  static absl::StatusOr<int> RankOf(const std::vector<int>& members, int id);

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  MembershipOptions options_;
};

}  // namespace flywheel::dist

#endif  // FLYWHEEL_DIST_MEMBERSHIP_H_
