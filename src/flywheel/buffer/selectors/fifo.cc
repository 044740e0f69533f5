#include "flywheel/buffer/selectors/fifo.h"

#include "absl/base/internal/raw_logging.h"
#include "flywheel/core/strings.h"

namespace flywheel {

void FifoSelector::Insert(uint64_t key, const SelectorItemInfo&) { keys_.push_back(key); }

void FifoSelector::Delete(uint64_t key) {
  ABSL_RAW_CHECK(!keys_.empty(), "FifoSelector::Delete on an empty selector");
  if (keys_.front() == key) {
    keys_.pop_front();
    SkipDeleted();
  } else {
    deleted_.insert(key);
  }
}

void FifoSelector::SkipDeleted() {
  while (!keys_.empty() && !deleted_.empty() && deleted_.erase(keys_.front()) > 0) {
    keys_.pop_front();
  }
}

ItemSelector::KeyWithProbability FifoSelector::Sample() {
  ABSL_RAW_CHECK(size() > 0, "FifoSelector::Sample on an empty selector");
  return {keys_.front(), 1.0};
}

std::string FifoSelector::DebugString() const { return StrCat("FifoSelector(size=", size(), ")"); }

}  // namespace flywheel
