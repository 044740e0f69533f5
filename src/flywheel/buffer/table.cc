#include "flywheel/buffer/table.h"

#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "flywheel/buffer/selectors/fifo.h"
#include "flywheel/buffer/selectors/prioritized.h"
#include "flywheel/buffer/selectors/role_priority.h"
#include "flywheel/buffer/selectors/uniform.h"
#include "flywheel/core/strings.h"

namespace flywheel {

std::unique_ptr<ItemSelector> MakeSelector(SelectorKind kind, double priority_exponent,
                                           uint64_t seed) {
  switch (kind) {
    case SelectorKind::kFifo:
      return std::make_unique<FifoSelector>();
    case SelectorKind::kUniform:
      return std::make_unique<UniformSelector>(seed);
    case SelectorKind::kPrioritized:
      return std::make_unique<PrioritizedSelector>(priority_exponent, seed);
    case SelectorKind::kRolePriority:
      return std::make_unique<RolePrioritySelector>();
  }
  return std::make_unique<FifoSelector>();
}

Table::Table(const TableOptions& options, std::unique_ptr<ItemSelector> selector,
             const RateLimiterOptions& limiter)
    : options_(options), selector_(std::move(selector)), limiter_(limiter) {}

Table::~Table() { Close(); }

bool Table::CanInsertLocked() const {
  if (options_.remover == RemoverKind::kBlock && SizeLocked() >= options_.max_size) return false;
  return limiter_.CanInsert(SizeLocked());
}

void Table::WakeProducers() {
  if (producers_waiting_ > 0) can_insert_.SignalAll();
}
void Table::WakeConsumers() {
  if (consumers_waiting_ > 0) can_sample_.SignalAll();
}

absl::Status Table::AwaitInsertLocked(absl::Time deadline) {
  if (!closed_ && CanInsertLocked()) return absl::OkStatus();
  const absl::Time start = absl::Now();
  ++producers_waiting_;
  bool timed_out = false;
  while (!closed_ && !CanInsertLocked() && !timed_out) {
    timed_out = can_insert_.WaitWithDeadline(&mu_, deadline);
  }
  --producers_waiting_;
  insert_blocked_ns_ += absl::ToInt64Nanoseconds(absl::Now() - start);
  if (closed_) return absl::CancelledError("buffer table is closed");
  if (CanInsertLocked()) return absl::OkStatus();
  const bool full = SizeLocked() >= options_.max_size;
  return absl::DeadlineExceededError(StrCat(
      "buffer insert timed out: ",
      full ? StrCat("table full (", SizeLocked(), " of buffer.max_size = ", options_.max_size,
                    " items); the learner is not sampling fast enough")
           : StrCat("rate limited: ", limiter_.DebugString())));
}

absl::Status Table::Insert(ItemPtr item, absl::Time deadline,
                           std::vector<std::shared_ptr<const Item>>* evicted) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = AwaitInsertLocked(deadline); !s.ok()) return s;
  CommitLocked(std::move(item), /*count_insert=*/true, evicted);
  return absl::OkStatus();
}

absl::Status Table::ReserveInsert(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = AwaitInsertLocked(deadline); !s.ok()) return s;
  ++reserved_;
  limiter_.Insert();
  return absl::OkStatus();
}

void Table::CommitInsert(ItemPtr item) {
  absl::MutexLock lock(&mu_);
  ABSL_RAW_CHECK(reserved_ > 0, "CommitInsert without ReserveInsert");
  --reserved_;
  limiter_.CancelInsert();  // CommitLocked counts it again
  CommitLocked(std::move(item), /*count_insert=*/true, nullptr);
}

void Table::CancelInsert() {
  absl::MutexLock lock(&mu_);
  ABSL_RAW_CHECK(reserved_ > 0, "CancelInsert without ReserveInsert");
  --reserved_;
  limiter_.CancelInsert();
  WakeProducers();
}

absl::StatusOr<int64_t> Table::ReserveInserts(int64_t max_count, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = AwaitInsertLocked(deadline); !s.ok()) return s;
  int64_t count = 0;
  while (count < max_count && (count == 0 || CanInsertLocked())) {
    ++reserved_;
    limiter_.Insert();
    ++count;
  }
  return count;
}

void Table::CommitInserts(std::vector<ItemPtr> items) {
  absl::MutexLock lock(&mu_);
  ABSL_RAW_CHECK(reserved_ >= static_cast<int64_t>(items.size()),
                 "CommitInserts without ReserveInserts");
  for (ItemPtr& item : items) {
    --reserved_;
    limiter_.CancelInsert();  // CommitLocked counts it again
    CommitLocked(std::move(item), /*count_insert=*/true, nullptr);
  }
}

void Table::CancelInserts(int64_t count) {
  absl::MutexLock lock(&mu_);
  ABSL_RAW_CHECK(reserved_ >= count, "CancelInserts without ReserveInserts");
  reserved_ -= count;
  limiter_.CancelInsert(count);
  WakeProducers();
}

absl::Status Table::AwaitCanInsert(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return AwaitInsertLocked(deadline);
}

void Table::InsertNow(ItemPtr item, bool count_insert,
                      std::vector<std::shared_ptr<const Item>>* evicted) {
  absl::MutexLock lock(&mu_);
  CommitLocked(std::move(item), count_insert, evicted);
}

void Table::CommitLocked(ItemPtr item, bool count_insert,
                         std::vector<std::shared_ptr<const Item>>* evicted) {
  if (options_.remover == RemoverKind::kFifo) {
    while (SizeLocked() >= options_.max_size && !items_.empty()) {
      ItemPtr oldest = items_.begin()->second;
      RemoveLocked(oldest->key);
      ++evicted_;
      if (evicted != nullptr) evicted->push_back(std::move(oldest));
    }
  }
  item->key = next_key_++;
  selector_->Insert(item->key, SelectorItemInfo{item->priority, item->role});
  items_.emplace(item->key, std::move(item));
  if (count_insert) limiter_.Insert();
  WakeConsumers();
}

void Table::RemoveLocked(uint64_t key) {
  selector_->Delete(key);
  items_.erase(key);
}

bool Table::IsStaleLocked(const Item& item) const {
  if (options_.max_staleness < 0 || item.min_version == kNoVersion) return false;
  return learner_version_ - item.min_version > options_.max_staleness;
}

absl::StatusOr<Table::SampleResult> Table::Sample(int64_t max_batch, absl::Time deadline) {
  if (max_batch < 1) {
    return absl::InvalidArgumentError(StrCat("sample batch size must be >= 1, got ", max_batch));
  }
  SampleResult result;
  absl::MutexLock lock(&mu_);
  auto can_sample = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return selector_->size() > 0 && limiter_.CanSample(static_cast<int64_t>(items_.size()));
  };
  const absl::Time start = absl::Now();
  bool timed_out = false;
  bool waited = false;
  while (result.items.empty()) {
    if (!can_sample() && !closed_) {
      waited = true;
      ++consumers_waiting_;
      while (!closed_ && !can_sample() && !timed_out) {
        timed_out = can_sample_.WaitWithDeadline(&mu_, deadline);
      }
      --consumers_waiting_;
    }
    if (closed_) {
      if (waited) sample_blocked_ns_ += absl::ToInt64Nanoseconds(absl::Now() - start);
      return absl::CancelledError("buffer table is closed");
    }
    if (!can_sample()) break;  // timed out
    while (static_cast<int64_t>(result.items.size()) < max_batch && can_sample()) {
      const ItemSelector::KeyWithProbability picked = selector_->Sample();
      auto it = items_.find(picked.key);
      ABSL_RAW_CHECK(it != items_.end(), "selector returned unknown key ");
      ItemPtr item = it->second;
      const int64_t lag =
          item->min_version == kNoVersion ? 0 : learner_version_ - item->min_version;
      if (IsStaleLocked(*item)) {
        RemoveLocked(item->key);
        ++dropped_stale_;
        if (options_.removals_count_as_samples) limiter_.Sample();
        result.stale_lags.push_back(lag);
        result.stale.push_back(std::move(item));
        continue;
      }
      ++item->times_sampled;
      limiter_.Sample();
      result.items.push_back(SampledItem{item, item->times_sampled, picked.probability, lag});
      if (options_.max_times_sampled > 0 && item->times_sampled >= options_.max_times_sampled) {
        RemoveLocked(item->key);
        result.removed.push_back(std::move(item));
      }
    }
    if (timed_out) break;
  }
  if (waited) sample_blocked_ns_ += absl::ToInt64Nanoseconds(absl::Now() - start);
  WakeProducers();
  if (result.items.empty() && result.stale.empty()) {
    return absl::DeadlineExceededError(
        StrCat("buffer sample timed out: ",
               items_.empty() ? std::string("table is empty")
                              : StrCat("rate limited: ", limiter_.DebugString()),
               " (", items_.size(), " items held)"));
  }
  return result;
}

std::vector<std::shared_ptr<const Item>> Table::Take(
    const absl::flat_hash_set<std::string>& trajectory_ids) {
  std::vector<std::shared_ptr<const Item>> taken;
  if (trajectory_ids.empty()) return taken;
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> keys;
  for (const auto& [key, item] : items_) {
    for (const ItemMember& m : item->members) {
      if (trajectory_ids.contains(m.trajectory->id)) {
        keys.push_back(key);
        break;
      }
    }
  }
  for (uint64_t key : keys) {
    taken.push_back(items_.at(key));
    RemoveLocked(key);
    if (options_.removals_count_as_samples) limiter_.Sample();
  }
  if (!keys.empty()) WakeProducers();
  return taken;
}

void Table::SetLearnerVersion(int64_t version) {
  absl::MutexLock lock(&mu_);
  learner_version_ = version;
}

void Table::RestoreCounts(int64_t inserts, int64_t samples, int64_t learner_version) {
  absl::MutexLock lock(&mu_);
  limiter_.Restore(inserts, samples);
  learner_version_ = learner_version;
  WakeProducers();
  WakeConsumers();
}

void Table::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  can_insert_.SignalAll();
  can_sample_.SignalAll();
}

bool Table::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

TableInfo Table::Info() const {
  absl::MutexLock lock(&mu_);
  TableInfo info;
  info.size = static_cast<int64_t>(items_.size());
  info.max_size = options_.max_size;
  info.inserts = limiter_.inserts();
  info.samples = limiter_.samples();
  info.learner_version = learner_version_;
  info.dropped_stale = dropped_stale_;
  info.evicted = evicted_;
  info.insert_blocked_ns = insert_blocked_ns_;
  info.sample_blocked_ns = sample_blocked_ns_;
  info.rate_limiter = limiter_.DebugString();
  return info;
}

std::string Table::DebugString() const {
  absl::MutexLock lock(&mu_);
  return StrCat("Table(size=", items_.size(), ", max_size=", options_.max_size,
                ", max_times_sampled=", options_.max_times_sampled,
                ", max_staleness=", options_.max_staleness, ", ", selector_->DebugString(), ", ",
                limiter_.DebugString(), ")");
}

}  // namespace flywheel
