#include "flywheel/buffer/id_ledger.h"

namespace flywheel {

IdLedger::Claim IdLedger::TryClaim(absl::string_view id) {
  auto [it, inserted] = ids_.try_emplace(id, State::kInFlight);
  if (inserted) return Claim::kNew;
  return it->second == State::kInFlight ? Claim::kInFlight : Claim::kDuplicate;
}

void IdLedger::Commit(absl::string_view id) {
  auto it = ids_.find(id);
  if (it == ids_.end() || it->second != State::kInFlight) return;
  it->second = State::kHeld;
  ++held_;
}

void IdLedger::Abandon(absl::string_view id) {
  auto it = ids_.find(id);
  if (it != ids_.end() && it->second == State::kInFlight) ids_.erase(it);
}

void IdLedger::Consume(absl::string_view id) {
  auto [it, inserted] = ids_.try_emplace(id, State::kConsumed);
  if (!inserted) {
    if (it->second == State::kConsumed) return;
    if (it->second == State::kHeld) --held_;
    it->second = State::kConsumed;
  }
  consumed_order_.emplace_back(id);
  while (static_cast<int64_t>(consumed_order_.size()) > remember_consumed_) {
    auto oldest = ids_.find(consumed_order_.front());
    if (oldest != ids_.end() && oldest->second == State::kConsumed) ids_.erase(oldest);
    consumed_order_.pop_front();
  }
}

void IdLedger::RestoreHeld(absl::string_view id) {
  auto [it, inserted] = ids_.try_emplace(id, State::kHeld);
  if (inserted) {
    ++held_;
  } else if (it->second != State::kHeld) {
    // Held wins over a consumed record of the same id: the store still has the item (a retry
    // of a consumed id is refused, so this only happens with a record older than the item).
    it->second = State::kHeld;
    ++held_;
  }
}

bool IdLedger::IsHeld(absl::string_view id) const {
  auto it = ids_.find(id);
  return it != ids_.end() && it->second == State::kHeld;
}

bool IdLedger::IsConsumed(absl::string_view id) const {
  auto it = ids_.find(id);
  return it != ids_.end() && it->second == State::kConsumed;
}

}  // namespace flywheel
