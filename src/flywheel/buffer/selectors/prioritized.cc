#include "flywheel/buffer/selectors/prioritized.h"

#include <cmath>

#include "absl/base/internal/raw_logging.h"
#include "flywheel/core/strings.h"

namespace flywheel {

void PrioritizedSelector::SetWeight(size_t slot, double weight) {
  size_t node = capacity_ + slot;
  const double delta = weight - tree_[node];
  for (; node >= 1; node /= 2) tree_[node] += delta;
}

void PrioritizedSelector::Insert(uint64_t key, const SelectorItemInfo& info) {
  ABSL_RAW_CHECK(info.priority >= 0, "negative priority ");
  if (keys_.size() == capacity_) {  // grow: rebuild the tree at twice the capacity
    std::vector<double> leaves(capacity_);
    for (size_t i = 0; i < capacity_; ++i) leaves[i] = tree_[capacity_ + i];
    capacity_ = capacity_ == 0 ? 16 : capacity_ * 2;
    tree_.assign(2 * capacity_, 0.0);
    for (size_t i = 0; i < leaves.size(); ++i) tree_[capacity_ + i] = leaves[i];
    for (size_t i = capacity_ - 1; i >= 1; --i) tree_[i] = tree_[2 * i] + tree_[2 * i + 1];
  }
  const size_t slot = keys_.size();
  keys_.push_back(key);
  index_[key] = slot;
  SetWeight(slot, std::pow(info.priority, exponent_));
}

void PrioritizedSelector::Delete(uint64_t key) {
  auto it = index_.find(key);
  ABSL_RAW_CHECK(it != index_.end(), "PrioritizedSelector::Delete: unknown key ");
  const size_t slot = it->second;
  const size_t last = keys_.size() - 1;
  index_.erase(it);
  if (slot != last) {
    keys_[slot] = keys_[last];
    index_[keys_[slot]] = slot;
    SetWeight(slot, tree_[capacity_ + last]);
  }
  SetWeight(last, 0.0);
  keys_.pop_back();
}

ItemSelector::KeyWithProbability PrioritizedSelector::Sample() {
  ABSL_RAW_CHECK(!keys_.empty(), "PrioritizedSelector::Sample on an empty selector");
  const double total = Total();
  if (!(total > 0)) {  // all priorities zero: fall back to uniform
    std::uniform_int_distribution<size_t> pick(0, keys_.size() - 1);
    return {keys_[pick(rng_)], 1.0 / static_cast<double>(keys_.size())};
  }
  double target = std::uniform_real_distribution<double>(0.0, total)(rng_);
  size_t node = 1;
  while (node < capacity_) {
    if (target < tree_[2 * node] || tree_[2 * node + 1] <= 0) {
      node = 2 * node;
    } else {
      target -= tree_[2 * node];
      node = 2 * node + 1;
    }
  }
  size_t slot = node - capacity_;
  if (slot >= keys_.size()) slot = keys_.size() - 1;  // float round-off at the right edge
  return {keys_[slot], tree_[capacity_ + slot] / total};
}

std::string PrioritizedSelector::DebugString() const {
  return StrCat("PrioritizedSelector(size=", keys_.size(), ", exponent=", exponent_,
                ", total=", Total(), ")");
}

}  // namespace flywheel
