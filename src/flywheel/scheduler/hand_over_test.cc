#include "flywheel/scheduler/hand_over.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace flywheel::scheduler {
namespace {

TEST(PlaceEpisodesTest, LeastLoadedCellTakesEachEpisodeLargestFirst) {
  std::vector<CellCapacity> cells = {
      {.episodes = 3, .slots = 4}, {.episodes = 1, .slots = 4}, {.episodes = 2, .slots = 4}};
  const std::vector<double> kv = {10, 10, 10};
  // Cell 1 (1/4) takes the first; then cells 1 and 2 are level at 2/4 and the
  // lower index takes the second; then cell 2 (2/4) takes the third.
  EXPECT_EQ(PlaceEpisodes(kv, cells), (std::vector<int>{1, 1, 2}));
  EXPECT_EQ(cells[0].episodes, 3);
  EXPECT_EQ(cells[1].episodes, 3);
  EXPECT_EQ(cells[2].episodes, 3);
}

TEST(PlaceEpisodesTest, AnEpisodeNoCellHasRoomForIsPlacedNowhere) {
  // Slots: one free in all. KV: the long context fits cell 0 only.
  std::vector<CellCapacity> cells = {{.episodes = 1, .slots = 2, .kv_tokens = 0, .kv_budget = 100},
                                     {.episodes = 3, .slots = 3}};
  const std::vector<double> kv = {20, 90};
  // Largest first: 90 goes to cell 0; 20 then fits nowhere (cell 0 is full,
  // cell 1 has no slot).
  EXPECT_EQ(PlaceEpisodes(kv, cells), (std::vector<int>{-1, 0}));
  EXPECT_EQ(cells[0].episodes, 2);
  EXPECT_DOUBLE_EQ(cells[0].kv_tokens, 90);
  EXPECT_EQ(cells[1].episodes, 3);
}

TEST(PlaceEpisodesTest, KvBudgetCountsInTheLoad) {
  // Same slots; cell 0's KV is nearly full, so cell 1 is the less loaded one.
  std::vector<CellCapacity> cells = {
      {.episodes = 1, .slots = 8, .kv_tokens = 900, .kv_budget = 1000},
      {.episodes = 2, .slots = 8, .kv_tokens = 100, .kv_budget = 1000}};
  const std::vector<double> kv = {50};
  EXPECT_EQ(PlaceEpisodes(kv, cells), (std::vector<int>{1}));
}

// Random traces of cells leaving rollout: whoever takes a leaving cell's
// episodes, no cell ever holds more episodes than its slots or more KV tokens
// than its budget, and an episode placed nowhere did not fit any cell.
TEST(PlaceEpisodesTest, NeverExceedsSlotsOrKvBudgetOnRandomTraces) {
  std::mt19937_64 rng(20261207);
  int64_t placed = 0, nowhere = 0;
  for (int trace = 0; trace < 300; ++trace) {
    const int n = std::uniform_int_distribution<int>(2, 9)(rng);
    const int64_t slots = std::uniform_int_distribution<int64_t>(1, 16)(rng);
    const double budget = std::uniform_real_distribution<double>(1e3, 1e5)(rng);
    struct Held {
      std::vector<double> kv;  // per episode
    };
    std::vector<Held> cells(n);
    std::vector<bool> rolling(n, true);
    std::uniform_real_distribution<double> context(10, budget / 2);
    for (int event = 0; event < 60; ++event) {
      const int c = std::uniform_int_distribution<int>(0, n - 1)(rng);
      const int kind = std::uniform_int_distribution<int>(0, 3)(rng);
      double used = 0;
      for (double k : cells[c].kv) used += k;
      if (kind == 0 && rolling[c]) {  // a new episode where it fits
        const double k = context(rng);
        if (static_cast<int64_t>(cells[c].kv.size()) < slots && used + k <= budget) {
          cells[c].kv.push_back(k);
        }
      } else if (kind == 1 && !cells[c].kv.empty()) {  // an episode finishes, or grows
        if (std::bernoulli_distribution(0.5)(rng)) {
          cells[c].kv.pop_back();
        } else if (used + 100 <= budget) {
          cells[c].kv.back() += 100;
        }
      } else if (kind == 2 && !rolling[c]) {
        rolling[c] = true;                   // back to rollout, empty
      } else if (kind == 3 && rolling[c]) {  // c leaves rollout: its episodes are handed over
        rolling[c] = false;
        std::vector<int> takers;
        std::vector<CellCapacity> capacity;
        for (int o = 0; o < n; ++o) {
          if (o == c || !rolling[o]) continue;
          CellCapacity cap{.episodes = static_cast<int64_t>(cells[o].kv.size()),
                           .slots = slots,
                           .kv_tokens = 0,
                           .kv_budget = budget};
          for (double k : cells[o].kv) cap.kv_tokens += k;
          capacity.push_back(cap);
          takers.push_back(o);
        }
        const std::vector<double> leaving = cells[c].kv;
        cells[c].kv.clear();
        const std::vector<int> placement = PlaceEpisodes(leaving, capacity);
        ASSERT_EQ(placement.size(), leaving.size());
        for (size_t e = 0; e < leaving.size(); ++e) {
          if (placement[e] < 0) {
            ++nowhere;
            for (const CellCapacity &cap : capacity) EXPECT_FALSE(cap.Fits(leaving[e]));
            continue;
          }
          ++placed;
          cells[takers[placement[e]]].kv.push_back(leaving[e]);
        }
      }
      for (int o = 0; o < n; ++o) {
        double kv = 0;
        for (double k : cells[o].kv) kv += k;
        ASSERT_LE(static_cast<int64_t>(cells[o].kv.size()), slots) << "trace " << trace;
        ASSERT_LE(kv, budget + 1e-6) << "trace " << trace;
      }
    }
  }
  // The traces exercise both outcomes.
  EXPECT_GT(placed, 100);
  EXPECT_GT(nowhere, 10);
}

}  // namespace
}  // namespace flywheel::scheduler
