#include "flywheel/buffer/selectors/uniform.h"

#include "absl/base/internal/raw_logging.h"
#include "flywheel/core/strings.h"

namespace flywheel {

void UniformSelector::Insert(uint64_t key, const SelectorItemInfo&) {
  index_[key] = keys_.size();
  keys_.push_back(key);
}

void UniformSelector::Delete(uint64_t key) {
  auto it = index_.find(key);
  ABSL_RAW_CHECK(it != index_.end(), "UniformSelector::Delete: unknown key ");
  const size_t pos = it->second;
  index_.erase(it);
  if (pos + 1 != keys_.size()) {  // swap-remove keeps the vector dense
    keys_[pos] = keys_.back();
    index_[keys_[pos]] = pos;
  }
  keys_.pop_back();
}

ItemSelector::KeyWithProbability UniformSelector::Sample() {
  ABSL_RAW_CHECK(!keys_.empty(), "UniformSelector::Sample on an empty selector");
  std::uniform_int_distribution<size_t> pick(0, keys_.size() - 1);
  return {keys_[pick(rng_)], 1.0 / static_cast<double>(keys_.size())};
}

std::string UniformSelector::DebugString() const {
  return StrCat("UniformSelector(size=", keys_.size(), ")");
}

}  // namespace flywheel
