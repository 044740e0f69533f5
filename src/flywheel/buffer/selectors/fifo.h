// First in, first out: Sample() returns the oldest key. With max_times_sampled = 1 this is a
// queue. Deleting the oldest key is O(1); deleting any other key is lazy (skipped later).
#ifndef FLYWHEEL_BUFFER_SELECTORS_FIFO_H_
#define FLYWHEEL_BUFFER_SELECTORS_FIFO_H_

#include <deque>

#include "absl/container/flat_hash_set.h"
#include "flywheel/buffer/selectors/interface.h"

namespace flywheel {

class FifoSelector : public ItemSelector {
 public:
  void Insert(uint64_t key, const SelectorItemInfo& info) override;
  void Delete(uint64_t key) override;
  KeyWithProbability Sample() override;
  int64_t size() const override { return static_cast<int64_t>(keys_.size() - deleted_.size()); }
  std::string DebugString() const override;

 private:
  void SkipDeleted();
  std::deque<uint64_t> keys_;
  absl::flat_hash_set<uint64_t> deleted_;  // deleted but still in keys_ (not at the front)
};

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_SELECTORS_FIFO_H_
