// Prioritized experience replay (Schaul et al. 2016): P(i) = p_i^α / Σ_k p_k^α, with α the
// priority exponent. A sum tree over dense slots gives O(log n) insert, delete and sample.
#ifndef FLYWHEEL_BUFFER_SELECTORS_PRIORITIZED_H_
#define FLYWHEEL_BUFFER_SELECTORS_PRIORITIZED_H_

#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "flywheel/buffer/selectors/interface.h"

namespace flywheel {

class PrioritizedSelector : public ItemSelector {
 public:
  explicit PrioritizedSelector(double priority_exponent, uint64_t seed = 1)
      : exponent_(priority_exponent), rng_(seed) {}
  void Insert(uint64_t key, const SelectorItemInfo& info) override;
  void Delete(uint64_t key) override;
  KeyWithProbability Sample() override;
  int64_t size() const override { return static_cast<int64_t>(keys_.size()); }
  std::string DebugString() const override;

 private:
  void SetWeight(size_t slot, double weight);
  double Total() const { return tree_.size() > 1 ? tree_[1] : 0.0; }

  const double exponent_;
  std::vector<uint64_t> keys_;  // dense slots
  absl::flat_hash_map<uint64_t, size_t> index_;
  // Implicit binary tree: leaves at [capacity_, 2 * capacity_), node i sums its children.
  std::vector<double> tree_;
  size_t capacity_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_SELECTORS_PRIORITIZED_H_
