// The trajectory buffer: what actors insert into and the learner samples from.
//
//   Insert(trajectory) ─▶ [durable store: synced WAL] ─▶ GroupAssembler ─▶ Table ─▶ Sample()
//                                                       (G members or    (rate limiter,
//                                                        straggler        selector,
//                                                        deadline)        staleness)
//
// An insert returns once the trajectory is held (and, in durable mode, in RocksDB's synced
// log); a full table or the rate limiter blocks it until its deadline (backpressure). In
// durable mode a sample deletes the items that leave the table from the store before it
// returns them, so a restart neither loses an acknowledged item nor hands out a consumed one.
// Every drop is counted by reason (metrics "buffer.dropped{reason=…}"). Thread-safe.
//
// Idempotent inserts (remember_ids > 0): an insert whose trajectory id the buffer holds, or
// let go of recently, is acknowledged without a second copy (counted: duplicate_inserts), so a
// producer may retry an insert whose acknowledgement it did not get (id_ledger.h).
//
// Leases (a sample with a lease owner, the remote learner's): the items that leave the table
// stay in the store, leased to the owner, until the owner acknowledges them (deleted, with a
// reason, in one synced write with their consumed records) or releases them (back in the
// table). A restart forgets leases: leased items are in the store, so they are available again.
//
//   table ──Sample(owner)──▶ leased ──Acknowledge(consumed)──▶ deleted (+ consumed record)
//     ▲                        │
//     └──Acknowledge(release_others, except `keep`)
#ifndef FLYWHEEL_BUFFER_BUFFER_H_
#define FLYWHEEL_BUFFER_BUFFER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/buffer/buffer_options.h"
#include "flywheel/buffer/durable_store.h"
#include "flywheel/buffer/group_assembler.h"
#include "flywheel/buffer/id_ledger.h"
#include "flywheel/buffer/item.h"
#include "flywheel/buffer/table.h"
#include "flywheel/core/clock.h"
#include "flywheel/core/metrics.h"

namespace flywheel {

struct BufferInfo {
  TableInfo table;
  int64_t pending_groups = 0;
  int64_t pending_members = 0;
  int64_t inserted = 0;  // trajectories accepted
  int64_t sampled = 0;   // items handed out
  int64_t dropped_stale = 0;
  int64_t dropped_incomplete_group = 0;
  int64_t dropped_late_group_member = 0;
  int64_t dropped_evicted = 0;
  int64_t recovered = 0;  // trajectories read back from the store at start
  int64_t duplicate_inserts = 0;  // inserts of an id already known, acknowledged, not stored
  int64_t leased = 0;             // trajectories leased now
  int64_t acknowledged = 0;       // leased (or recovered) trajectories acknowledged as consumed
  int64_t released = 0;           // leased trajectories returned to the table
  int64_t store_syncs = 0;
  double uptime_s = 0;
  double insert_rate = 0;  // trajectories/s since start
  double sample_rate = 0;  // items/s since start
  bool durable = false;
};

class Buffer {
 public:
  // Opens (and in durable mode recovers) a buffer. `clock` drives straggler deadlines; with
  // `start_group_timer` false nothing expires groups but ExpireGroups() (tests, virtual time).
  static absl::StatusOr<std::unique_ptr<Buffer>> Create(const BufferOptions& options,
                                                        Clock* clock = RealClock(),
                                                        bool start_group_timer = true);
  ~Buffer();

  // `wire`, when given, is the trajectory's serialized v1.Trajectory (the service has it); it
  // is stored and sent to samplers as is. Trajectories are not validated here: the service
  // validates at the trust boundary.
  absl::Status Insert(std::shared_ptr<const Trajectory> trajectory, absl::Time deadline,
                      std::shared_ptr<std::string> wire = nullptr);

  // Inserts a prefix of `members` with one synced write in durable mode (a client's pipelined
  // inserts): waits until the deadline only for the first, takes the rest while they fit
  // without waiting, so earlier inserts are never held back by later ones. Fills one status
  // per handled trajectory and returns how many were handled (>= 1 unless `members` is empty).
  size_t InsertBatch(std::vector<ItemMember>& members, size_t begin, absl::Time deadline,
                     std::vector<absl::Status>* statuses);

  // Up to max_batch items (at least one), waiting until the deadline for the first. With a
  // `lease_owner`, the items that leave the table stay in the store, leased to it.
  absl::StatusOr<std::vector<SampledItem>> Sample(int64_t max_batch, absl::Time deadline,
                                                  std::string_view lease_owner = {});

  struct AcknowledgeResult {
    int64_t consumed = 0;  // trajectories deleted now
    int64_t released = 0;  // trajectories returned to the table
    int64_t unknown = 0;   // acknowledged ids the buffer no longer held (consumed before)
  };
  // Deletes the `consumed` trajectories (leased, or back in the table after a restart), with
  // their reasons, in one synced write; then, with `release_others`, returns every other lease
  // of `owner` to the table, except the leases of items with an id in `keep`.
  absl::StatusOr<AcknowledgeResult> Acknowledge(
      std::string_view owner, const std::vector<DurableStore::Consumed>& consumed,
      bool release_others, const absl::flat_hash_set<std::string>& keep = {});

  // Sets the learner's policy version used by the staleness filter (persisted when durable).
  void SetLearnerVersion(int64_t version);
  // Releases or discards groups whose straggler deadline has passed on the clock.
  void ExpireGroups();
  // Discards every group still waiting for members (counted as incomplete_group); returns how
  // many trajectories went.
  absl::StatusOr<int64_t> DiscardPendingGroups();
  // Wakes all waiters (CANCELLED) and stops the group timer.
  void Close();

  BufferInfo Info() const;
  const BufferOptions& options() const { return options_; }
  std::string DebugString() const;
  DurableStore* store() { return store_.get(); }

 private:
  Buffer(const BufferOptions& options, Clock* clock);
  // A trajectory the buffer holds while a learner trains on it (leases).
  struct Lease {
    std::shared_ptr<const Item> item;
    std::string owner;
    std::vector<bool> consumed;  // per member of `item`
  };

  absl::Status Recover();
  absl::Status InsertSingle(ItemMember member, absl::Time deadline);
  absl::Status InsertGroupMember(ItemMember member, absl::Time deadline);
  // Inserts released groups, deletes discarded members, counts.
  absl::Status Apply(GroupAssembler::Output& out, bool count_insert);

  bool tracks_ids() const { return options_.remember_ids > 0; }
  // Claims `id` for an insert: true = new (now in flight), false = a duplicate to acknowledge
  // without storing it (counted). Waits until `deadline` while an insert of the same id is in
  // flight, then answers for its outcome.
  absl::StatusOr<bool> ClaimId(const std::string& id, absl::Time deadline);
  // Claims the ids of members[begin, end) that are new, stopping at the first that is not;
  // returns the end of the claimed run.
  size_t ClaimNewIds(const std::vector<ItemMember>& members, size_t begin, size_t end);
  // Ends the claim of `id` (or of members[begin, end)): held when `stored`, forgotten otherwise.
  void SettleId(const std::string& id, bool stored);
  void SettleIds(const std::vector<ItemMember>& members, size_t begin, size_t end, bool stored);
  // Adds members that left the buffer for `reason` to `write` (store deletes and consumed
  // records) and marks their ids consumed.
  void Retire(const ItemMember& member, std::string_view reason, DurableStore::Write* write);
  void Retire(const std::vector<std::shared_ptr<const Item>>& items, std::string_view reason,
              DurableStore::Write* write);
  absl::Status CommitRetired(const DurableStore::Write& write);
  // Leases the items to `owner`.
  void LeaseItems(const std::vector<std::shared_ptr<const Item>>& items, std::string_view owner);
  // An item of `item`'s members that are not marked in `skip` (empty = none), or null when none
  // is left.
  static ItemPtr Remainder(const Item& item, const std::vector<bool>& skip);
  void GroupTimerLoop();
  void PublishInsertCount() const;

  const BufferOptions options_;
  Clock* const clock_;
  const absl::Time start_;
  Table table_;
  std::unique_ptr<DurableStore> store_;
  std::atomic<uint64_t> next_storage_key_{1};

  mutable absl::Mutex groups_mu_;  // lock order: groups_mu_ before the table's
  GroupAssembler assembler_ ABSL_GUARDED_BY(groups_mu_);
  bool closed_ ABSL_GUARDED_BY(groups_mu_) = false;
  absl::CondVar timer_wake_;
  std::thread group_timer_;

  std::atomic<int64_t> inserted_{0};
  std::atomic<int64_t> sampled_{0};
  mutable std::atomic<int64_t> published_inserts_{0};
  std::atomic<int64_t> dropped_incomplete_{0};
  std::atomic<int64_t> dropped_late_{0};
  std::atomic<int64_t> dropped_evicted_{0};
  int64_t recovered_ = 0;

  // Idempotent inserts. Lock order: ids_mu_ and leases_mu_ are taken alone (nothing else is
  // locked while either is held, except leases_mu_ before ids_mu_ to retire acknowledged ids).
  mutable absl::Mutex ids_mu_ ABSL_ACQUIRED_AFTER(leases_mu_);
  IdLedger ids_ ABSL_GUARDED_BY(ids_mu_);
  absl::CondVar id_settled_;  // an in-flight id was committed or abandoned
  std::atomic<int64_t> duplicate_inserts_{0};

  // Leases by trajectory id; the members of one item share their Lease.
  mutable absl::Mutex leases_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Lease>> leased_ ABSL_GUARDED_BY(leases_mu_);
  std::atomic<int64_t> acknowledged_{0};
  std::atomic<int64_t> released_{0};

  struct Metrics {
    Counter* inserts;
    Counter* samples;
    Counter* dropped_stale;
    Counter* dropped_incomplete_group;
    Counter* dropped_late_group_member;
    Counter* dropped_evicted;
    Counter* duplicate_inserts;
    Counter* acknowledged;
    Counter* released;
    Gauge* leased;
    Gauge* size;
    Gauge* capacity;
    Gauge* insert_blocked_s;
    Gauge* sample_blocked_s;
    Histogram* lag;
    Histogram* insert_to_sample_s;
  };
  Metrics metrics_;
};

// The table options and rate limiter a BufferOptions describes.
TableOptions MakeTableOptions(const BufferOptions& options);
RateLimiterOptions MakeRateLimiterOptions(const BufferOptions& options);

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_BUFFER_H_
