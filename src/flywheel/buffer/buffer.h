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
#ifndef FLYWHEEL_BUFFER_BUFFER_H_
#define FLYWHEEL_BUFFER_BUFFER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/buffer/buffer_options.h"
#include "flywheel/buffer/durable_store.h"
#include "flywheel/buffer/group_assembler.h"
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

  // Up to max_batch items (at least one), waiting until the deadline for the first.
  absl::StatusOr<std::vector<SampledItem>> Sample(int64_t max_batch, absl::Time deadline);

  // Sets the learner's policy version used by the staleness filter (persisted when durable).
  void SetLearnerVersion(int64_t version);
  // Releases or discards groups whose straggler deadline has passed on the clock.
  void ExpireGroups();
  // Wakes all waiters (CANCELLED) and stops the group timer.
  void Close();

  BufferInfo Info() const;
  const BufferOptions& options() const { return options_; }
  std::string DebugString() const;
  DurableStore* store() { return store_.get(); }

 private:
  Buffer(const BufferOptions& options, Clock* clock);
  absl::Status Recover();
  absl::Status InsertSingle(ItemMember member, absl::Time deadline);
  absl::Status InsertGroupMember(ItemMember member, absl::Time deadline);
  // Inserts released groups, deletes discarded members, counts.
  absl::Status Apply(GroupAssembler::Output& out, bool count_insert);
  absl::Status DeleteFromStore(const std::vector<std::shared_ptr<const Item>>& items);
  absl::Status DeleteMembersFromStore(const std::vector<ItemMember>& members);
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

  struct Metrics {
    Counter* inserts;
    Counter* samples;
    Counter* dropped_stale;
    Counter* dropped_incomplete_group;
    Counter* dropped_late_group_member;
    Counter* dropped_evicted;
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
