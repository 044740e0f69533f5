// The learner's staleness bound. The buffer already drops items whose lag exceeds max_staleness
// when they are sampled, but the learner's version may move on while a batch waits, so the
// learner enforces the bound again on what it is about to train on (counted, never silent).
//
//   lag = learner_version − min(policy versions of the trajectory's generated tokens)
//
// A trajectory without generated tokens has lag 0 (there is nothing stale to re-weight).
#ifndef FLYWHEEL_LEARNER_STALENESS_H_
#define FLYWHEEL_LEARNER_STALENESS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "flywheel/core/metrics.h"
#include "flywheel/core/trajectory.h"

namespace flywheel {

struct StalenessReport {
  int64_t kept = 0;
  int64_t dropped = 0;
  std::map<int64_t, int64_t> lag_counts;  // exact lag → trajectories (kept and dropped)
  std::unique_ptr<Histogram> lags;        // this step's lag histogram (bounds: kLagBounds)
};

// {"0": n0, "1": n1, …}: exact lag → trajectories, as metrics lines and summaries write them
// (the learner's step lines, the elastic core's, the cluster simulator's).
nlohmann::json LagCountsJson(const std::map<int64_t, int64_t>& lag_counts);

// The mean and the largest lag of such counts (0 and 0 when there are none).
struct LagSummary {
  double mean = 0;
  int64_t max = 0;
};
LagSummary SummariseLags(const std::map<int64_t, int64_t>& lag_counts);

class StalenessFilter {
 public:
  // max_staleness = -1: no bound (lags are still recorded).
  explicit StalenessFilter(int64_t max_staleness);

  static int64_t Lag(const Trajectory& t, int64_t learner_version);
  static const std::vector<double>& LagBounds();

  // Removes the trajectories whose lag exceeds the bound from `batch` (keeping order), records
  // the lags in this step's report and in the process-wide "learner.lag" histogram, and counts
  // drops in "learner.dropped{reason=stale}".
  StalenessReport Apply(int64_t learner_version, std::vector<Trajectory>& batch) const;

  int64_t max_staleness() const { return max_staleness_; }

 private:
  int64_t max_staleness_;
  Histogram* global_lags_;
  Counter* dropped_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_STALENESS_H_
