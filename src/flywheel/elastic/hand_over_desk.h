// Episodes handed between the cells of one process (`flywheel train`): a cell leaving rollout
// parks its suspended episodes here (actor/suspended_episode.h); each control-plane tick places
// the parked ones on rolling-out cells with room (ControlPlane::Tick, scheduler/hand_over.h),
// and each taker collects its own at its next look. Cells of other processes never hand over:
// an episode's environment lives in its cell's process.
//
//   leaving cell: Suspend ─▶ Park ─▶ parked ─▶ tick: TickInputs (their KV tokens) ─▶ placements
//                                                    ─▶ Deliver ─▶ tray of cell c ─▶ c: Collect
//
// Thread-safety: every method may be called from any thread.
#ifndef FLYWHEEL_ELASTIC_HAND_OVER_DESK_H_
#define FLYWHEEL_ELASTIC_HAND_OVER_DESK_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/actor/suspended_episode.h"
#include "flywheel/elastic/control_plane.h"

namespace flywheel {

class HandOverDesk {
 public:
  explicit HandOverDesk(ControlPlane* plane) : plane_(plane) {}  // borrowed

  // Parks a leaving cell's episodes and wakes the control loop to place them.
  void Park(std::vector<SuspendedEpisode> episodes);
  // The tick's view: each parked episode's KV tokens (the context its taker prefills again), in
  // the order Deliver takes the tick's placements, and the episodes delivered but not collected.
  void Describe(TickInputs& inputs) const;
  // Hands the first placements.size() parked episodes to their takers (-1: stays parked).
  void Deliver(const std::vector<int>& placements);
  // The episodes placed on `cell`.
  std::vector<SuspendedEpisode> Collect(int cell);
  // What is parked or delivered and not collected: in flight on no cell (the stop cancels them).
  int64_t Holding() const;

 private:
  ControlPlane* const plane_;
  mutable absl::Mutex mu_;
  std::vector<SuspendedEpisode> parked_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::vector<SuspendedEpisode>> trays_ ABSL_GUARDED_BY(mu_);  // by taker cell
};

}  // namespace flywheel

#endif  // FLYWHEEL_ELASTIC_HAND_OVER_DESK_H_
