#include "flywheel/buffer/buffer.h"

#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/core/trajectory_proto.h"
#include "flywheel/observe/trace_recorder.h"

namespace flywheel {
namespace {

const std::vector<double>& LagBounds() {
  static const std::vector<double>* bounds =
      new std::vector<double>{0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128, 256};
  return *bounds;
}

std::shared_ptr<std::string> Serialize(const Trajectory& t) {
  auto wire = std::make_shared<std::string>();
  ToProto(t).SerializeToString(wire.get());
  return wire;
}

ItemPtr MakeItem(std::vector<ItemMember> members, int64_t now_ns) {
  auto item = std::make_shared<Item>();
  for (ItemMember& m : members) item->members.push_back(std::move(m));
  item->inserted_unix_ns = now_ns;
  item->Summarize();
  return item;
}

}  // namespace

TableOptions MakeTableOptions(const BufferOptions& o) {
  TableOptions t;
  t.max_size = o.max_size;
  t.max_staleness = o.max_staleness;
  const bool queue = o.rate_limiter == RateLimiterKind::kQueue;
  t.max_times_sampled = queue ? 1 : o.max_times_sampled;
  t.remover = queue ? RemoverKind::kBlock : o.remover;
  t.removals_count_as_samples = queue;
  return t;
}

RateLimiterOptions MakeRateLimiterOptions(const BufferOptions& o) {
  if (o.rate_limiter == RateLimiterKind::kQueue) return RateLimiterOptions::Queue(o.max_size);
  return RateLimiterOptions::SampleToInsertRatio(o.samples_per_insert, o.min_size_to_sample,
                                                 o.error_buffer);
}

Buffer::Buffer(const BufferOptions& options, Clock* clock)
    : options_(options),
      clock_(clock),
      start_(absl::Now()),
      table_(MakeTableOptions(options),
             MakeSelector(options.rate_limiter == RateLimiterKind::kQueue &&
                                  options.selector != SelectorKind::kRolePriority
                              ? SelectorKind::kFifo
                              : options.selector,
                          options.priority_exponent),
             MakeRateLimiterOptions(options)),
      assembler_(options.group_size, options.min_group_size,
                 absl::Seconds(options.straggler_timeout_s)),
      ids_(options.remember_ids) {
  MetricsRegistry& r = MetricsRegistry::Global();
  metrics_.inserts = r.GetCounter("buffer.inserts", "trajectories inserted");
  metrics_.samples = r.GetCounter(
      "buffer.samples", "items handed to the learner (a group each when groups are assembled)");
  constexpr std::string_view kDropped = "trajectories dropped, by reason";
  metrics_.dropped_stale = r.GetCounter("buffer.dropped{reason=stale}", kDropped);
  metrics_.dropped_incomplete_group = r.GetCounter("buffer.dropped{reason=incomplete_group}");
  metrics_.dropped_late_group_member = r.GetCounter("buffer.dropped{reason=late_group_member}");
  metrics_.dropped_evicted = r.GetCounter("buffer.dropped{reason=evicted}");
  metrics_.duplicate_inserts =
      r.GetCounter("buffer.duplicate_inserts",
                   "inserts of a trajectory id already known: acknowledged, not stored");
  metrics_.acknowledged = r.GetCounter("buffer.acknowledged",
                                       "leased trajectories the learner acknowledged as consumed");
  metrics_.released =
      r.GetCounter("buffer.released", "leased trajectories returned to the table by the learner");
  metrics_.leased = r.GetGauge("buffer.leased", "trajectories leased to a learner now");
  metrics_.size = r.GetGauge("buffer.size", "trajectories held (the buffer's fill)");
  metrics_.capacity = r.GetGauge("buffer.capacity", "trajectories the buffer holds at most");
  metrics_.capacity->Set(static_cast<double>(options_.max_size));
  metrics_.insert_blocked_s = r.GetGauge("buffer.insert_blocked_seconds",
                                         "seconds inserts waited on the rate limiter, in all");
  metrics_.sample_blocked_s = r.GetGauge("buffer.sample_blocked_seconds",
                                         "seconds samples waited on the rate limiter, in all");
  metrics_.lag = r.GetHistogram("buffer.sample_lag", LagBounds(),
                                "policy versions between a sampled trajectory and the learner");
  metrics_.insert_to_sample_s =
      r.GetHistogram("buffer.insert_to_sample_seconds", SecondsBounds(),
                     "time a trajectory waited in the buffer, insert to sample");
}

absl::StatusOr<std::unique_ptr<Buffer>> Buffer::Create(const BufferOptions& options, Clock* clock,
                                                       bool start_group_timer) {
  RETURN_IF_ERROR(options.Validate());
  if (options.rate_limiter == RateLimiterKind::kRatio) {
    RETURN_IF_ERROR(Annotate(MakeRateLimiterOptions(options).Validate(), "buffer"));
  }
  std::unique_ptr<Buffer> buffer(new Buffer(options, clock));
  if (options.durable) {
    ASSIGN_OR_RETURN(buffer->store_,
                     DurableStore::Open(options.path, nullptr, options.remember_ids));
    RETURN_IF_ERROR(buffer->Recover());
    Buffer* self = buffer.get();
    buffer->store_->SetMetaSource([self] {
      const TableInfo info = self->table_.Info();
      return DurableStore::Meta{info.inserts, info.samples, info.learner_version};
    });
  }
  if (start_group_timer && options.group_size > 1) {
    buffer->group_timer_ = std::thread([b = buffer.get()] { b->GroupTimerLoop(); });
  }
  return buffer;
}

absl::Status Buffer::Recover() {
  ASSIGN_OR_RETURN(const DurableStore::Meta meta, store_->ReadMeta());
  if (tracks_ids()) {
    // Consumed first: an id the store still holds is held, whatever an older record says.
    RETURN_IF_ERROR(store_->ForEachConsumed([&](std::string_view id, std::string_view) {
      absl::MutexLock lock(&ids_mu_);
      ids_.Consume(absl::string_view(id.data(), id.size()));
      return absl::OkStatus();
    }));
  }
  uint64_t max_key = 0;
  GroupAssembler::Output out;
  const absl::Time now = clock_->Now();
  RETURN_IF_ERROR(store_->ForEach([&](uint64_t key, std::string_view value) -> absl::Status {
    v1::Trajectory proto;
    if (!proto.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return absl::DataLossError(StrCat("buffer store ", options_.path, ": record ", key,
                                        " does not parse as a flywheel.v1.Trajectory"));
    }
    ASSIGN_OR_RETURN(Trajectory t, FromProto(proto));
    ItemMember member{std::make_shared<const Trajectory>(std::move(t)),
                      std::make_shared<std::string>(value), key};
    max_key = std::max(max_key, key);
    ++recovered_;
    if (tracks_ids()) {
      absl::MutexLock lock(&ids_mu_);
      ids_.RestoreHeld(member.trajectory->id);
    }
    absl::MutexLock lock(&groups_mu_);
    assembler_.Add(std::move(member), now, &out);
    return absl::OkStatus();
  }));
  next_storage_key_ = max_key + 1;
  RETURN_IF_ERROR(Apply(out, /*count_insert=*/false));
  // In a queue every insert is matched by one removal, so the exact counts follow from what
  // is held; a ratio limiter takes the counts last written with a commit.
  int64_t inserts = meta.inserts;
  if (options_.rate_limiter == RateLimiterKind::kQueue) {
    inserts = meta.samples + table_.Info().size;
  }
  table_.RestoreCounts(inserts, meta.samples, meta.learner_version);
  return absl::OkStatus();
}

Buffer::~Buffer() { Close(); }

void Buffer::Close() {
  {
    absl::MutexLock lock(&groups_mu_);
    closed_ = true;
    timer_wake_.SignalAll();
  }
  table_.Close();
  {
    absl::MutexLock lock(&ids_mu_);
    id_settled_.SignalAll();
  }
  if (group_timer_.joinable()) group_timer_.join();
}

absl::Status Buffer::Insert(std::shared_ptr<const Trajectory> trajectory, absl::Time deadline,
                            std::shared_ptr<std::string> wire) {
  if (trajectory == nullptr) return absl::InvalidArgumentError("buffer insert: null trajectory");
  TraceSpan span("buffer", "insert");
  const bool claimed = tracks_ids() && !trajectory->id.empty();
  std::shared_ptr<const Trajectory> claim;  // keeps the id for SettleId
  if (claimed) {
    ASSIGN_OR_RETURN(const bool fresh, ClaimId(trajectory->id, deadline));
    if (!fresh) return absl::OkStatus();  // held or consumed already: a retry
    claim = trajectory;
  }
  ItemMember member{std::move(trajectory), std::move(wire), 0};
  absl::Status s = options_.group_size > 1 ? InsertGroupMember(std::move(member), deadline)
                                           : InsertSingle(std::move(member), deadline);
  if (claimed) SettleId(claim->id, s.ok());
  if (s.ok()) inserted_.fetch_add(1, std::memory_order_relaxed);
  return s;
}

absl::StatusOr<bool> Buffer::ClaimId(const std::string& id, absl::Time deadline) {
  absl::MutexLock lock(&ids_mu_);
  while (true) {
    switch (ids_.TryClaim(id)) {
      case IdLedger::Claim::kNew:
        return true;
      case IdLedger::Claim::kDuplicate:
        duplicate_inserts_.fetch_add(1, std::memory_order_relaxed);
        metrics_.duplicate_inserts->Increment();
        return false;
      case IdLedger::Claim::kInFlight:
        break;
    }
    // A retry that overtook its original (whose client gave up on it): its outcome decides.
    if (table_.closed()) return absl::CancelledError("buffer is closed");
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          StrCat("buffer insert of ", id, ": an insert of the same id is still in flight"));
    }
    id_settled_.WaitWithDeadline(&ids_mu_,
                                 std::min(deadline, absl::Now() + absl::Milliseconds(100)));
  }
}

size_t Buffer::ClaimNewIds(const std::vector<ItemMember>& members, size_t begin, size_t end) {
  absl::MutexLock lock(&ids_mu_);
  for (size_t i = begin; i < end; ++i) {
    const std::string& id = members[i].trajectory->id;
    if (!id.empty() && ids_.TryClaim(id) != IdLedger::Claim::kNew) return i;
  }
  return end;
}

void Buffer::SettleId(const std::string& id, bool stored) {
  absl::MutexLock lock(&ids_mu_);
  stored ? ids_.Commit(id) : ids_.Abandon(id);
  id_settled_.SignalAll();
}

void Buffer::SettleIds(const std::vector<ItemMember>& members, size_t begin, size_t end,
                       bool stored) {
  if (begin >= end) return;
  absl::MutexLock lock(&ids_mu_);
  for (size_t i = begin; i < end; ++i) {
    const std::string& id = members[i].trajectory->id;
    if (id.empty()) continue;
    stored ? ids_.Commit(id) : ids_.Abandon(id);
  }
  id_settled_.SignalAll();
}

size_t Buffer::InsertBatch(std::vector<ItemMember>& members, size_t begin, absl::Time deadline,
                           std::vector<absl::Status>* statuses) {
  if (begin >= members.size()) return 0;
  if (store_ == nullptr || options_.group_size > 1) {
    size_t i = begin;
    for (; i < members.size(); ++i) {
      absl::Status s = Insert(members[i].trajectory, i == begin ? deadline : absl::InfinitePast(),
                              members[i].wire);
      if (i > begin && s.code() == absl::StatusCode::kDeadlineExceeded) break;  // no room now
      statuses->push_back(std::move(s));
    }
    return i - begin;
  }
  // Durable: claim the ids (a leading duplicate is acknowledged alone; the batch stops before
  // any later id that is not new), reserve the slots that are free, write them in one synced
  // batch, commit them all.
  size_t claimed_end = members.size();
  if (tracks_ids()) {
    const std::string& first_id = members[begin].trajectory->id;
    if (!first_id.empty()) {
      absl::StatusOr<bool> fresh = ClaimId(first_id, deadline);
      if (!fresh.ok() || !*fresh) {
        statuses->push_back(fresh.status());  // OK for a duplicate
        return 1;
      }
    }
    claimed_end = ClaimNewIds(members, begin + 1, members.size());
  }
  absl::StatusOr<int64_t> reserved =
      table_.ReserveInserts(static_cast<int64_t>(claimed_end - begin), deadline);
  if (!reserved.ok()) {  // not even the first fitted before its deadline
    if (tracks_ids()) SettleIds(members, begin, claimed_end, /*stored=*/false);
    statuses->push_back(reserved.status());
    return 1;
  }
  const size_t end = begin + static_cast<size_t>(*reserved);
  if (tracks_ids()) SettleIds(members, end, claimed_end, /*stored=*/false);  // no room yet
  DurableStore::Write write;
  write.puts.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) {
    ItemMember& m = members[i];
    if (m.wire == nullptr) m.wire = Serialize(*m.trajectory);
    m.storage_key = next_storage_key_.fetch_add(1);
    write.puts.emplace_back(m.storage_key, m.wire);
  }
  const absl::Status write_status = store_->Commit(write);
  if (tracks_ids()) SettleIds(members, begin, end, write_status.ok());
  if (write_status.ok()) {
    std::vector<ItemPtr> items;
    items.reserve(end - begin);
    const int64_t now = absl::GetCurrentTimeNanos();
    for (size_t i = begin; i < end; ++i) items.push_back(MakeItem({std::move(members[i])}, now));
    table_.CommitInserts(std::move(items));
  } else {
    table_.CancelInserts(static_cast<int64_t>(end - begin));
  }
  for (size_t i = begin; i < end; ++i) statuses->push_back(write_status);
  if (write_status.ok()) {
    inserted_.fetch_add(static_cast<int64_t>(end - begin), std::memory_order_relaxed);
  }
  return end - begin;
}

absl::Status Buffer::InsertSingle(ItemMember member, absl::Time deadline) {
  if (store_ == nullptr) {
    std::vector<std::shared_ptr<const Item>> evicted;
    RETURN_IF_ERROR(table_.Insert(MakeItem({std::move(member)}, absl::GetCurrentTimeNanos()),
                                  deadline, &evicted));
    dropped_evicted_ += static_cast<int64_t>(evicted.size());
    metrics_.dropped_evicted->Increment(static_cast<int64_t>(evicted.size()));
    return absl::OkStatus();
  }
  // Durable: reserve the slot first so that an acknowledged item never waits for room.
  RETURN_IF_ERROR(table_.ReserveInsert(deadline));
  if (member.wire == nullptr) member.wire = Serialize(*member.trajectory);
  member.storage_key = next_storage_key_.fetch_add(1);
  DurableStore::Write write;
  write.puts.emplace_back(member.storage_key, member.wire);
  if (absl::Status s = store_->Commit(write); !s.ok()) {
    table_.CancelInsert();
    return s;
  }
  std::vector<std::shared_ptr<const Item>> evicted;
  table_.CommitInsert(MakeItem({std::move(member)}, absl::GetCurrentTimeNanos()));
  return absl::OkStatus();
}

absl::Status Buffer::InsertGroupMember(ItemMember member, absl::Time deadline) {
  // Backpressure on arrival; the released group itself is inserted without waiting.
  RETURN_IF_ERROR(table_.AwaitCanInsert(deadline));
  if (store_ != nullptr) {
    if (member.wire == nullptr) member.wire = Serialize(*member.trajectory);
    member.storage_key = next_storage_key_.fetch_add(1);
    DurableStore::Write write;
    write.puts.emplace_back(member.storage_key, member.wire);
    RETURN_IF_ERROR(store_->Commit(write));
  }
  GroupAssembler::Output out;
  {
    absl::MutexLock lock(&groups_mu_);
    if (closed_) return absl::CancelledError("buffer is closed");
    assembler_.Add(std::move(member), clock_->Now(), &out);
    timer_wake_.SignalAll();
  }
  return Apply(out, /*count_insert=*/true);
}

absl::StatusOr<int64_t> Buffer::DiscardPendingGroups() {
  GroupAssembler::Output out;
  {
    absl::MutexLock lock(&groups_mu_);
    assembler_.DiscardPending(&out);
  }
  const int64_t discarded = static_cast<int64_t>(out.discarded_incomplete.size());
  RETURN_IF_ERROR(Apply(out, /*count_insert=*/true));
  return discarded;
}

absl::Status Buffer::Apply(GroupAssembler::Output& out, bool count_insert) {
  std::vector<std::shared_ptr<const Item>> evicted;
  for (auto& group : out.released) {
    table_.InsertNow(MakeItem(std::move(group), absl::GetCurrentTimeNanos()), count_insert,
                     &evicted);
  }
  dropped_incomplete_ += static_cast<int64_t>(out.discarded_incomplete.size());
  metrics_.dropped_incomplete_group->Increment(
      static_cast<int64_t>(out.discarded_incomplete.size()));
  dropped_late_ += static_cast<int64_t>(out.discarded_late.size());
  metrics_.dropped_late_group_member->Increment(static_cast<int64_t>(out.discarded_late.size()));
  dropped_evicted_ += static_cast<int64_t>(evicted.size());
  metrics_.dropped_evicted->Increment(static_cast<int64_t>(evicted.size()));
  DurableStore::Write write;
  for (const ItemMember& m : out.discarded_incomplete) Retire(m, "incomplete_group", &write);
  for (const ItemMember& m : out.discarded_late) Retire(m, "late_group_member", &write);
  Retire(evicted, "evicted", &write);
  return CommitRetired(write);
}

void Buffer::Retire(const ItemMember& member, std::string_view reason, DurableStore::Write* write) {
  if (store_ != nullptr && member.storage_key != 0) {
    write->deletes.push_back(member.storage_key);
    if (tracks_ids()) write->consumed.push_back({member.trajectory->id, std::string(reason)});
  }
  if (tracks_ids()) {
    absl::MutexLock lock(&ids_mu_);
    ids_.Consume(member.trajectory->id);
  }
}

void Buffer::Retire(const std::vector<std::shared_ptr<const Item>>& items, std::string_view reason,
                    DurableStore::Write* write) {
  for (const auto& item : items) {
    for (const ItemMember& m : item->members) Retire(m, reason, write);
  }
}

absl::Status Buffer::CommitRetired(const DurableStore::Write& write) {
  if (store_ == nullptr || (write.deletes.empty() && write.consumed.empty())) {
    return absl::OkStatus();
  }
  return store_->Commit(write);
}

void Buffer::LeaseItems(const std::vector<std::shared_ptr<const Item>>& items,
                        std::string_view owner) {
  if (items.empty()) return;
  absl::MutexLock lock(&leases_mu_);
  for (const auto& item : items) {
    auto lease = std::make_shared<Lease>(
        Lease{item, std::string(owner), std::vector<bool>(item->members.size(), false)});
    for (const ItemMember& m : item->members) leased_[m.trajectory->id] = lease;
  }
  metrics_.leased->Set(static_cast<double>(leased_.size()));
}

ItemPtr Buffer::Remainder(const Item& item, const std::vector<bool>& skip) {
  std::vector<ItemMember> rest;
  for (size_t i = 0; i < item.members.size(); ++i) {
    if (i >= skip.size() || !skip[i]) rest.push_back(item.members[i]);
  }
  if (rest.empty()) return nullptr;
  ItemPtr out = MakeItem(std::move(rest), item.inserted_unix_ns);
  out->priority = item.priority;
  return out;
}

absl::StatusOr<Buffer::AcknowledgeResult> Buffer::Acknowledge(
    std::string_view owner, const std::vector<DurableStore::Consumed>& consumed,
    bool release_others, const absl::flat_hash_set<std::string>& keep) {
  AcknowledgeResult result;
  DurableStore::Write write;
  absl::flat_hash_map<std::string, std::string> not_leased;  // id -> reason
  std::vector<ItemPtr> back_to_table;
  {
    absl::MutexLock lock(&leases_mu_);
    for (const DurableStore::Consumed& c : consumed) {
      auto it = leased_.find(c.id);
      if (it == leased_.end()) {
        not_leased.emplace(c.id, c.reason);
        continue;
      }
      Lease& lease = *it->second;
      for (size_t i = 0; i < lease.item->members.size(); ++i) {
        const ItemMember& m = lease.item->members[i];
        if (!lease.consumed[i] && m.trajectory->id == c.id) {
          lease.consumed[i] = true;
          Retire(m, c.reason, &write);
          ++result.consumed;
          break;
        }
      }
      leased_.erase(it);
    }
    if (release_others) {
      absl::flat_hash_set<const Lease*> seen;
      std::vector<std::shared_ptr<Lease>> mine;
      for (const auto& [id, lease] : leased_) {
        if (lease->owner == owner && seen.insert(lease.get()).second) mine.push_back(lease);
      }
      for (const std::shared_ptr<Lease>& lease : mine) {
        const auto& members = lease->item->members;
        bool kept = false;
        for (size_t i = 0; i < members.size(); ++i) {
          kept |= !lease->consumed[i] && keep.contains(members[i].trajectory->id);
        }
        if (kept) continue;
        for (size_t i = 0; i < members.size(); ++i) {
          if (lease->consumed[i]) continue;
          leased_.erase(members[i].trajectory->id);
          ++result.released;
        }
        if (ItemPtr rest = Remainder(*lease->item, lease->consumed)) {
          back_to_table.push_back(std::move(rest));
        }
      }
    }
    metrics_.leased->Set(static_cast<double>(leased_.size()));
  }
  if (!not_leased.empty()) {
    // Not leased: after a restart of this buffer the item is in the table again, or pending in
    // its group; or it was consumed already (an acknowledgement repeated).
    absl::flat_hash_set<std::string> ids;
    for (const auto& [id, reason] : not_leased) ids.insert(id);
    auto take = [&](const ItemMember& m) {
      auto it = not_leased.find(m.trajectory->id);
      if (it == not_leased.end()) return false;
      Retire(m, it->second, &write);
      ++result.consumed;
      not_leased.erase(it);
      return true;
    };
    for (const auto& item : table_.Take(ids)) {
      std::vector<bool> taken(item->members.size(), false);
      for (size_t i = 0; i < item->members.size(); ++i) taken[i] = take(item->members[i]);
      if (ItemPtr rest = Remainder(*item, taken)) back_to_table.push_back(std::move(rest));
    }
    std::vector<ItemMember> pending;
    {
      absl::MutexLock lock(&groups_mu_);
      pending = assembler_.TakePending(ids);
    }
    for (const ItemMember& m : pending) take(m);
    result.unknown = static_cast<int64_t>(not_leased.size());
    if (tracks_ids()) {
      absl::MutexLock lock(&ids_mu_);
      for (const auto& [id, reason] : not_leased) ids_.Consume(id);
    }
  }
  RETURN_IF_ERROR(CommitRetired(write));
  for (ItemPtr& item : back_to_table) table_.InsertNow(std::move(item), /*count_insert=*/true);
  acknowledged_.fetch_add(result.consumed, std::memory_order_relaxed);
  released_.fetch_add(result.released, std::memory_order_relaxed);
  metrics_.acknowledged->Increment(result.consumed);
  metrics_.released->Increment(result.released);
  return result;
}

absl::StatusOr<std::vector<SampledItem>> Buffer::Sample(int64_t max_batch, absl::Time deadline,
                                                        std::string_view lease_owner) {
  TraceSpan span("buffer", "sample");
  ASSIGN_OR_RETURN(Table::SampleResult result, table_.Sample(max_batch, deadline));
  // Consumed and dropped items leave the store before the batch is handed out: after a crash
  // they are neither lost (not yet deleted: handed out again) nor delivered twice. Leased
  // ones stay until their owner acknowledges them.
  DurableStore::Write write;
  Retire(result.stale, "stale", &write);
  if (lease_owner.empty()) {
    Retire(result.removed, "sampled", &write);
  } else {
    LeaseItems(result.removed, lease_owner);
  }
  RETURN_IF_ERROR(CommitRetired(write));
  if (!result.stale_lags.empty()) {
    metrics_.dropped_stale->Increment(static_cast<int64_t>(result.stale_lags.size()));
    for (int64_t lag : result.stale_lags) metrics_.lag->Observe(static_cast<double>(lag));
  }
  const int64_t now_ns = absl::GetCurrentTimeNanos();  // as MakeItem stamps inserts
  for (const SampledItem& s : result.items) {
    metrics_.lag->Observe(static_cast<double>(s.lag));
    metrics_.insert_to_sample_s->Observe(static_cast<double>(now_ns - s.item->inserted_unix_ns) *
                                         1e-9);
  }
  sampled_.fetch_add(static_cast<int64_t>(result.items.size()), std::memory_order_relaxed);
  PublishInsertCount();
  metrics_.samples->Increment(static_cast<int64_t>(result.items.size()));
  if (result.items.empty()) {
    return absl::DeadlineExceededError(
        StrCat("buffer sample timed out after dropping ", result.stale_lags.size(),
               " stale items (buffer.max_staleness = ", options_.max_staleness, ")"));
  }
  return std::move(result.items);
}

void Buffer::SetLearnerVersion(int64_t version) { table_.SetLearnerVersion(version); }

void Buffer::ExpireGroups() {
  GroupAssembler::Output out;
  {
    absl::MutexLock lock(&groups_mu_);
    assembler_.Expire(clock_->Now(), &out);
  }
  if (!out.empty()) {
    if (absl::Status s = Apply(out, /*count_insert=*/true); !s.ok()) {
      // The store is latched; the next insert reports it to a producer.
    }
  }
}

void Buffer::GroupTimerLoop() {
  while (true) {
    {
      absl::MutexLock lock(&groups_mu_);
      if (closed_) return;
      const absl::Time next = std::min(assembler_.next_deadline(), absl::Now() + absl::Seconds(1));
      timer_wake_.WaitWithDeadline(&groups_mu_,
                                   std::max(next, absl::Now() + absl::Milliseconds(1)));
      if (closed_) return;
    }
    ExpireGroups();
  }
}

void Buffer::PublishInsertCount() const {
  // Producers bump one relaxed counter; the global metric catches up here, so the hot path
  // does not touch a second contended cache line per insert.
  const int64_t now = inserted_.load(std::memory_order_relaxed);
  const int64_t before = published_inserts_.exchange(now, std::memory_order_relaxed);
  if (now > before) metrics_.inserts->Increment(now - before);
}

BufferInfo Buffer::Info() const {
  PublishInsertCount();
  BufferInfo info;
  info.table = table_.Info();
  {
    absl::MutexLock lock(&groups_mu_);
    info.pending_groups = assembler_.pending_groups();
    info.pending_members = assembler_.pending_members();
  }
  info.inserted = inserted_.load();
  info.sampled = sampled_.load();
  info.dropped_stale = info.table.dropped_stale;
  info.dropped_incomplete_group = dropped_incomplete_.load();
  info.dropped_late_group_member = dropped_late_.load();
  info.dropped_evicted = dropped_evicted_.load();
  info.recovered = recovered_;
  info.duplicate_inserts = duplicate_inserts_.load();
  info.acknowledged = acknowledged_.load();
  info.released = released_.load();
  {
    absl::MutexLock lock(&leases_mu_);
    info.leased = static_cast<int64_t>(leased_.size());
  }
  info.store_syncs = store_ != nullptr ? store_->syncs() : 0;
  info.durable = store_ != nullptr;
  info.uptime_s = absl::ToDoubleSeconds(absl::Now() - start_);
  if (info.uptime_s > 0) {
    info.insert_rate = static_cast<double>(info.inserted) / info.uptime_s;
    info.sample_rate = static_cast<double>(info.sampled) / info.uptime_s;
  }
  metrics_.size->Set(static_cast<double>(info.table.size));
  metrics_.insert_blocked_s->Set(static_cast<double>(info.table.insert_blocked_ns) * 1e-9);
  metrics_.sample_blocked_s->Set(static_cast<double>(info.table.sample_blocked_ns) * 1e-9);
  return info;
}

std::string Buffer::DebugString() const {
  return StrCat("Buffer(durable=", store_ != nullptr, ", group_size=", options_.group_size, ", ",
                table_.DebugString(), ")");
}

}  // namespace flywheel
