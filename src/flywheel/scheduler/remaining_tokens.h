// The water-level rule's token unit (water_level.h, WorkUnit::kTokens): an estimate of the
// tokens the episodes in flight will still generate, from the lengths of the episodes that
// finished recently.
//
// An episode that has generated g policy tokens is expected to generate
//
//     r(g) = mean over recent finished lengths L > g of (L - g)
//
// more: the mean residual length of the episodes that ran at least as long. With heavy-tailed
// lengths r(g) grows with g (a long episode is likely to be a very long one), which counting
// episodes cannot see. When no recent episode ran longer than g, r(g) = g (it is expected to
// run as long again; the Pareto residual with tail index 2), and before any episode finished,
// r(g) = max(prior, g). A full cell holds episodes_in_flight fresh episodes, r(0) each.
//
// Thread-safe: Observe and the estimates may be called from any thread.
#ifndef FLYWHEEL_SCHEDULER_REMAINING_TOKENS_H_
#define FLYWHEEL_SCHEDULER_REMAINING_TOKENS_H_

#include <cstdint>
#include <deque>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace flywheel::scheduler {

class RemainingTokens {
 public:
  // The jobs' window: enough finished episodes to see a heavy tail, few enough to follow a
  // policy whose answers grow or shrink as it learns.
  static constexpr int64_t kWindow = 256;

  // `window`: how many recent finished episodes the estimate keeps (>= 1); `prior`: the tokens
  // a fresh episode is expected to generate before any has finished (> 0).
  RemainingTokens(int64_t window, double prior);

  // An episode finished after generating `tokens` policy tokens.
  void Observe(int64_t tokens);
  // r(g) for one episode.
  double Remaining(int64_t generated) const;
  // Σ r(g) over the episodes in flight.
  double Remaining(std::span<const int64_t> generated) const;
  // r(0): what a fresh episode is expected to generate.
  double Fresh() const { return Remaining(int64_t{0}); }
  int64_t observed() const;

 private:
  double RemainingLocked(int64_t generated) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const size_t window_;
  const double prior_;
  mutable absl::Mutex mu_;
  std::deque<int64_t> lengths_ ABSL_GUARDED_BY(mu_);  // the most recent last
  int64_t observed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace flywheel::scheduler

#endif  // FLYWHEEL_SCHEDULER_REMAINING_TOKENS_H_
