// The elastic scheduler's water-level rule (QwenGyre, ARCHITECTURE.md "Elastic scheduling"), as
// a pure policy: observations in, one decision out. It owns no threads and no cells; the caller
// carries each move out (drain or cancel the cell's generations, join the training step).
//
// Cells each hold a model replica. Core cells always train and are not modelled here. Satellite
// cells 0..S-1 switch between rollout and train in one fixed order:
//
//   satellite:   0     1     2     3          R = rollout_cells() = 2
//   role:        roll  roll  train train      the trainers are always a suffix
//                      ^     ^
//                      |     next to come back (last to leave, index R)
//                      next to leave (highest index still in rollout, R-1)
//
// Let w be the remaining generation work of the batch being generated, in `unit`: episodes in
// flight (dispatched - finished) or the remaining-token estimate. With R rollout satellites and
// c = capacity_per_cell, satellite R-1 moves to train when
//
//     w <= (R-1) * c * (1 - hysteresis)              (the work fits on one cell fewer, with margin)
//
// and it has held its role for min_residence. While w > 0, at least min_rollout_cells satellites
// keep rolling out; once w == 0 (batch fully generated) the formula lets the last ones train too.
// When a new batch is demanded, satellites come back one per decision in reverse order (index R
// first), again only after min_residence; no satellite moves to train while a demand stands.
// Work that appears with fewer than min_rollout_cells rolling out (no demand was signalled)
// brings satellites back the same way. One move per decision at most.
//
// Thread-safety: none; the scheduler loop that owns the policy serialises its calls.
#ifndef FLYWHEEL_SCHEDULER_WATER_LEVEL_H_
#define FLYWHEEL_SCHEDULER_WATER_LEVEL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/scheduler/role_controller.h"

namespace flywheel::scheduler {

struct WaterLevelOptions {
  // Satellite cells, ids 0..satellites-1. All start in rollout.
  int satellites = 1;
  // Work one rollout cell holds, in `unit`: concurrent episode slots, or tokens it can generate
  // in flight (its KV-cache budget).
  double capacity_per_cell = 1;
  WorkUnit unit = WorkUnit::kEpisodes;
  // Fraction of the remaining capacity the work must stay below before a cell leaves, in [0, 1).
  // 0 moves as soon as the work fits exactly; 0.2 waits until it is at most 80 % of it.
  double hysteresis = 0.1;
  // A satellite keeps a role at least this long after its last switch (the first switch of a
  // satellite is never blocked).
  absl::Duration min_residence = absl::Seconds(10);
  // Rollout satellites kept while the batch still has work (w > 0), in [1, satellites]: with no
  // rollout cell left nobody would finish it, since core cells never generate.
  int min_rollout_cells = 1;

  absl::Status Validate() const;
  std::string DebugString() const;
};

class WaterLevelPolicy final : public RoleController {
 public:
  static absl::StatusOr<WaterLevelPolicy> Create(WaterLevelOptions options);

  // Decides at most one move and applies it to the role table. Fails with kInvalidArgument on
  // an impossible observation (finished > dispatched, negative or non-finite counts, time going
  // backwards); the role table is then unchanged.
  absl::StatusOr<SchedulerDecision> Decide(const SchedulerObservation& observation) override;

  CellRole role(int satellite) const override;  // satellite in [0, satellites)
  int rollout_cells() const override { return rollout_cells_; }
  int satellites() const override { return options_.satellites; }
  WorkUnit unit() const override { return options_.unit; }
  // The time of the satellite's last switch; InfinitePast() before its first.
  absl::Time last_switch(int satellite) const;
  const WaterLevelOptions& options() const { return options_; }
  std::string DebugString() const override;

 private:
  explicit WaterLevelPolicy(WaterLevelOptions options);

  absl::Status CheckObservation(const SchedulerObservation& observation) const;
  double Work(const SchedulerObservation& observation) const;
  double Capacity(const SchedulerObservation& observation) const;
  void DecideReturn(SchedulerDecision& decision) const;
  void DecideRelease(SchedulerDecision& decision) const;
  // Whether `satellite` has held its role for min_residence at `now`; else fills `decision`.
  bool Resident(int satellite, absl::Time now, SchedulerDecision& decision) const;

  WaterLevelOptions options_;
  // Satellites [0, rollout_cells_) roll out, the rest train: the fixed order keeps the trainers a
  // suffix, so this count is the whole role table.
  int rollout_cells_;
  std::vector<absl::Time> last_switch_;  // per satellite
  absl::Time last_now_ = absl::InfinitePast();
  bool has_last_cause_ = false;
  SchedulerDecision::Cause last_cause_ = SchedulerDecision::Cause::kAboveThreshold;
};

}  // namespace flywheel::scheduler

#endif  // FLYWHEEL_SCHEDULER_WATER_LEVEL_H_
