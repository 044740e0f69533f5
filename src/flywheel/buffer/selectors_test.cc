#include <gtest/gtest.h>

#include <map>

#include "flywheel/buffer/selectors/fifo.h"
#include "flywheel/buffer/selectors/prioritized.h"
#include "flywheel/buffer/selectors/role_priority.h"
#include "flywheel/buffer/selectors/uniform.h"

namespace flywheel {
namespace {

TEST(FifoSelectorTest, OldestFirstAndDeleteAnywhere) {
  FifoSelector s;
  for (uint64_t k = 1; k <= 4; ++k) s.Insert(k, {});
  EXPECT_EQ(s.Sample().key, 1u);
  s.Delete(2);  // not at the front: lazily skipped
  s.Delete(1);
  EXPECT_EQ(s.Sample().key, 3u);
  EXPECT_EQ(s.size(), 2);
}

TEST(UniformSelectorTest, EveryKeyDrawnAboutEqually) {
  UniformSelector s(7);
  for (uint64_t k = 1; k <= 4; ++k) s.Insert(k, {});
  s.Delete(2);
  std::map<uint64_t, int> counts;
  for (int i = 0; i < 3000; ++i) counts[s.Sample().key]++;
  EXPECT_EQ(counts.count(2), 0u);
  for (uint64_t k : {1, 3, 4}) EXPECT_NEAR(counts[k], 1000, 150) << k;
}

TEST(PrioritizedSelectorTest, ProbabilityFollowsPriorityToTheExponent) {
  PrioritizedSelector s(/*priority_exponent=*/2.0, 3);
  s.Insert(1, {1.0, Role::kMain});
  s.Insert(2, {2.0, Role::kMain});  // weight 4 vs 1
  s.Insert(3, {100.0, Role::kMain});
  s.Delete(3);
  std::map<uint64_t, int> counts;
  for (int i = 0; i < 5000; ++i) {
    auto picked = s.Sample();
    counts[picked.key]++;
    if (picked.key == 2) {
      EXPECT_NEAR(picked.probability, 0.8, 1e-9);
    }
  }
  EXPECT_NEAR(counts[2] / 5000.0, 0.8, 0.03);
  for (uint64_t k = 10; k < 100; ++k) s.Insert(k, {1.0, Role::kMain});  // grows the tree
  EXPECT_EQ(s.size(), 92);
}

TEST(RolePrioritySelectorTest, MainBeforeSummaryBeforeSubAgent) {
  RolePrioritySelector s;
  s.Insert(1, {1.0, Role::kSubAgentSummary});
  s.Insert(2, {1.0, Role::kSubAgent});
  s.Insert(3, {1.0, Role::kMainSummary});
  s.Insert(4, {1.0, Role::kMain});
  s.Insert(5, {1.0, Role::kMain});
  std::vector<uint64_t> order;
  while (s.size() > 0) {
    order.push_back(s.Sample().key);
    s.Delete(order.back());
  }
  EXPECT_EQ(order, (std::vector<uint64_t>{4, 5, 3, 2, 1}));
}

}  // namespace
}  // namespace flywheel
