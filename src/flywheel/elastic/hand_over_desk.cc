#include "flywheel/elastic/hand_over_desk.h"

#include <utility>

namespace flywheel {

void HandOverDesk::Park(std::vector<SuspendedEpisode> episodes) {
  if (episodes.empty()) return;
  {
    absl::MutexLock lock(&mu_);
    for (SuspendedEpisode& e : episodes) parked_.push_back(std::move(e));
  }
  plane_->Notify();
}

void HandOverDesk::Describe(TickInputs& inputs) const {
  absl::MutexLock lock(&mu_);
  inputs.parked.clear();
  for (const SuspendedEpisode& e : parked_) {
    inputs.parked.push_back(static_cast<double>(e.trajectory.tokens.size()));
  }
  inputs.delivering = 0;
  for (const auto& [cell, tray] : trays_) inputs.delivering += static_cast<int64_t>(tray.size());
}

void HandOverDesk::Deliver(const std::vector<int>& placements) {
  absl::MutexLock lock(&mu_);
  std::vector<SuspendedEpisode> still;
  for (size_t e = 0; e < parked_.size(); ++e) {
    const int taker = e < placements.size() ? placements[e] : -1;
    if (taker < 0) {
      still.push_back(std::move(parked_[e]));
    } else {
      trays_[taker].push_back(std::move(parked_[e]));
    }
  }
  parked_ = std::move(still);
}

std::vector<SuspendedEpisode> HandOverDesk::Collect(int cell) {
  absl::MutexLock lock(&mu_);
  auto it = trays_.find(cell);
  if (it == trays_.end()) return {};
  std::vector<SuspendedEpisode> mine = std::move(it->second);
  trays_.erase(it);
  return mine;
}

int64_t HandOverDesk::Holding() const {
  absl::MutexLock lock(&mu_);
  int64_t n = static_cast<int64_t>(parked_.size());
  for (const auto& [cell, tray] : trays_) n += static_cast<int64_t>(tray.size());
  return n;
}

}  // namespace flywheel
