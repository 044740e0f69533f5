// Every held key equally likely (experience replay). O(1) insert, delete and sample.
#ifndef FLYWHEEL_BUFFER_SELECTORS_UNIFORM_H_
#define FLYWHEEL_BUFFER_SELECTORS_UNIFORM_H_

#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "flywheel/buffer/selectors/interface.h"

namespace flywheel {

class UniformSelector : public ItemSelector {
 public:
  explicit UniformSelector(uint64_t seed = 1) : rng_(seed) {}
  void Insert(uint64_t key, const SelectorItemInfo& info) override;
  void Delete(uint64_t key) override;
  KeyWithProbability Sample() override;
  int64_t size() const override { return static_cast<int64_t>(keys_.size()); }
  std::string DebugString() const override;

 private:
  std::vector<uint64_t> keys_;
  absl::flat_hash_map<uint64_t, size_t> index_;  // key -> position in keys_
  std::mt19937_64 rng_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_SELECTORS_UNIFORM_H_
