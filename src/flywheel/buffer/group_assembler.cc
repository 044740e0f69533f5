#include "flywheel/buffer/group_assembler.h"

#include <utility>

namespace flywheel {

void GroupAssembler::Close(const std::string& group_id) {
  if (closed_.insert(group_id).second) closed_order_.push_back(group_id);
  while (closed_order_.size() > kRememberedGroups) {
    closed_.erase(closed_order_.front());
    closed_order_.pop_front();
  }
}

void GroupAssembler::Add(ItemMember member, absl::Time now, Output* out) {
  const std::string& group_id = member.trajectory->group_id;
  if (group_size_ <= 1 || group_id.empty()) {
    out->released.push_back({std::move(member)});
    return;
  }
  if (closed_.contains(group_id)) {
    out->discarded_late.push_back(std::move(member));
    return;
  }
  auto [it, inserted] = pending_.try_emplace(group_id);
  if (inserted) it->second.deadline = now + straggler_timeout_;
  it->second.members.push_back(std::move(member));
  ++pending_members_;
  if (static_cast<int64_t>(it->second.members.size()) >= group_size_) {
    pending_members_ -= static_cast<int64_t>(it->second.members.size());
    out->released.push_back(std::move(it->second.members));
    const std::string id = it->first;
    pending_.erase(it);
    Close(id);
  }
}

std::vector<ItemMember> GroupAssembler::TakePending(const absl::flat_hash_set<std::string>& ids) {
  std::vector<ItemMember> taken;
  if (ids.empty()) return taken;
  for (auto it = pending_.begin(); it != pending_.end();) {
    std::vector<ItemMember>& members = it->second.members;
    for (size_t i = 0; i < members.size();) {
      if (ids.contains(members[i].trajectory->id)) {
        taken.push_back(std::move(members[i]));
        members.erase(members.begin() + static_cast<std::ptrdiff_t>(i));
        --pending_members_;
      } else {
        ++i;
      }
    }
    if (members.empty()) {
      pending_.erase(it++);
    } else {
      ++it;
    }
  }
  return taken;
}

void GroupAssembler::Expire(absl::Time now, Output* out) {
  std::vector<std::string> expired;
  for (const auto& [id, pending] : pending_) {
    if (pending.deadline <= now) expired.push_back(id);
  }
  for (const std::string& id : expired) {
    auto node = pending_.extract(id);
    std::vector<ItemMember>& members = node.mapped().members;
    pending_members_ -= static_cast<int64_t>(members.size());
    if (static_cast<int64_t>(members.size()) >= min_group_size_) {
      out->released.push_back(std::move(members));
    } else {
      for (ItemMember& m : members) out->discarded_incomplete.push_back(std::move(m));
    }
    Close(id);
  }
}

void GroupAssembler::DiscardPending(Output* out) {
  for (auto& [id, pending] : pending_) {
    for (ItemMember& m : pending.members) out->discarded_incomplete.push_back(std::move(m));
    Close(id);
  }
  pending_.clear();
  pending_members_ = 0;
}

absl::Time GroupAssembler::next_deadline() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [id, pending] : pending_) next = std::min(next, pending.deadline);
  return next;
}

}  // namespace flywheel
