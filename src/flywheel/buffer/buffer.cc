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
                 absl::Seconds(options.straggler_timeout_s)) {
  MetricsRegistry& r = MetricsRegistry::Global();
  metrics_.inserts = r.GetCounter("buffer.inserts", "trajectories inserted");
  metrics_.samples = r.GetCounter(
      "buffer.samples", "items handed to the learner (a group each when groups are assembled)");
  constexpr std::string_view kDropped = "trajectories dropped, by reason";
  metrics_.dropped_stale = r.GetCounter("buffer.dropped{reason=stale}", kDropped);
  metrics_.dropped_incomplete_group = r.GetCounter("buffer.dropped{reason=incomplete_group}");
  metrics_.dropped_late_group_member = r.GetCounter("buffer.dropped{reason=late_group_member}");
  metrics_.dropped_evicted = r.GetCounter("buffer.dropped{reason=evicted}");
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
    ASSIGN_OR_RETURN(buffer->store_, DurableStore::Open(options.path));
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
  if (group_timer_.joinable()) group_timer_.join();
}

absl::Status Buffer::Insert(std::shared_ptr<const Trajectory> trajectory, absl::Time deadline,
                            std::shared_ptr<std::string> wire) {
  if (trajectory == nullptr) return absl::InvalidArgumentError("buffer insert: null trajectory");
  TraceSpan span("buffer", "insert");
  ItemMember member{std::move(trajectory), std::move(wire), 0};
  absl::Status s = options_.group_size > 1 ? InsertGroupMember(std::move(member), deadline)
                                           : InsertSingle(std::move(member), deadline);
  if (s.ok()) inserted_.fetch_add(1, std::memory_order_relaxed);
  return s;
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
  // Durable: reserve the slots that are free, write them in one synced batch, commit them all.
  absl::StatusOr<int64_t> reserved =
      table_.ReserveInserts(static_cast<int64_t>(members.size() - begin), deadline);
  if (!reserved.ok()) {  // not even the first fitted before its deadline
    statuses->push_back(reserved.status());
    return 1;
  }
  const size_t end = begin + static_cast<size_t>(*reserved);
  DurableStore::Write write;
  write.puts.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) {
    ItemMember& m = members[i];
    if (m.wire == nullptr) m.wire = Serialize(*m.trajectory);
    m.storage_key = next_storage_key_.fetch_add(1);
    write.puts.emplace_back(m.storage_key, m.wire);
  }
  const absl::Status write_status = store_->Commit(write);
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
  RETURN_IF_ERROR(DeleteMembersFromStore(out.discarded_incomplete));
  RETURN_IF_ERROR(DeleteMembersFromStore(out.discarded_late));
  return DeleteFromStore(evicted);
}

absl::Status Buffer::DeleteMembersFromStore(const std::vector<ItemMember>& members) {
  if (store_ == nullptr || members.empty()) return absl::OkStatus();
  DurableStore::Write write;
  for (const ItemMember& m : members) {
    if (m.storage_key != 0) write.deletes.push_back(m.storage_key);
  }
  return write.deletes.empty() ? absl::OkStatus() : store_->Commit(write);
}

absl::Status Buffer::DeleteFromStore(const std::vector<std::shared_ptr<const Item>>& items) {
  if (store_ == nullptr || items.empty()) return absl::OkStatus();
  DurableStore::Write write;
  for (const auto& item : items) {
    for (const ItemMember& m : item->members) {
      if (m.storage_key != 0) write.deletes.push_back(m.storage_key);
    }
  }
  return write.deletes.empty() ? absl::OkStatus() : store_->Commit(write);
}

absl::StatusOr<std::vector<SampledItem>> Buffer::Sample(int64_t max_batch, absl::Time deadline) {
  TraceSpan span("buffer", "sample");
  ASSIGN_OR_RETURN(Table::SampleResult result, table_.Sample(max_batch, deadline));
  // Consumed and dropped items leave the store before the batch is handed out: after a crash
  // they are neither lost (not yet deleted: handed out again) nor delivered twice.
  RETURN_IF_ERROR(DeleteFromStore(result.removed));
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
