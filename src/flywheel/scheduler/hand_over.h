// Where the episodes of a satellite leaving rollout go (ARCHITECTURE.md "Elastic scheduling"):
// to the rollout cells that still have room for them, never beyond a cell's episode slots or
// its KV-cache budget, least loaded first. An episode no cell has room for is placed nowhere
// (-1): the caller finishes it in place (scheduler.drain_on_switch) or parks it at its last
// environment boundary until a slot frees, and places it again then.
//
//   leaving cell ── episodes (KV tokens each) ──▶ PlaceEpisodes ──▶ taker per episode, or -1
//                                                 ▲   largest context first; each to the cell
//   rollout cells ── held / slots, KV / budget ───┘   least loaded after taking it
//
// A cell's load is the larger of its slot and KV fractions. Largest first (first-fit
// decreasing) keeps a long context from being left over when short ones took the room it
// needed. The loads are updated as episodes are placed, so a caller can place parked episodes
// and a leaving cell's in one pass.
//
// Pure: no threads, no clock.
#ifndef FLYWHEEL_SCHEDULER_HAND_OVER_H_
#define FLYWHEEL_SCHEDULER_HAND_OVER_H_

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace flywheel::scheduler {

// A rollout cell that may take episodes.
struct CellCapacity {
  int64_t episodes = 0;  // held now
  int64_t slots = 0;     // held at most
  double kv_tokens = 0;  // KV-cache tokens its episodes hold now
  double kv_budget = std::numeric_limits<double>::infinity();  // KV tokens it holds at most

  bool Fits(double tokens) const {
    return episodes + 1 <= slots && kv_tokens + tokens <= kv_budget;
  }
  // The larger of the slot and KV fractions in use.
  double Load() const;
};

// Places each episode (its KV tokens: the context the taker will prefill again)
// on one of `cells`, updating their loads. Returns, per episode in the given
// order, the index of its taker in `cells`, or -1 when none has room.
std::vector<int> PlaceEpisodes(std::span<const double> kv_tokens, std::span<CellCapacity> cells);

}  // namespace flywheel::scheduler

#endif  // FLYWHEEL_SCHEDULER_HAND_OVER_H_
