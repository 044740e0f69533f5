#include "flywheel/scheduler/hand_over.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace flywheel::scheduler {

double CellCapacity::Load() const {
  const double slot_load = slots > 0 ? static_cast<double>(episodes) / slots : 1.0;
  const double kv_load = std::isinf(kv_budget) ? 0.0 : kv_budget > 0 ? kv_tokens / kv_budget : 1.0;
  return std::max(slot_load, kv_load);
}

std::vector<int> PlaceEpisodes(std::span<const double> kv_tokens, std::span<CellCapacity> cells) {
  std::vector<int> taker(kv_tokens.size(), -1);
  std::vector<size_t> order(kv_tokens.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return kv_tokens[a] > kv_tokens[b]; });
  for (size_t e : order) {
    int best = -1;
    double best_load = 0;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (!cells[c].Fits(kv_tokens[e])) continue;
      CellCapacity after = cells[c];
      ++after.episodes;
      after.kv_tokens += kv_tokens[e];
      const double load = after.Load();
      if (best < 0 || load < best_load) {
        best = static_cast<int>(c);
        best_load = load;
      }
    }
    if (best < 0) continue;
    ++cells[best].episodes;
    cells[best].kv_tokens += kv_tokens[e];
    taker[e] = best;
  }
  return taker;
}

}  // namespace flywheel::scheduler
