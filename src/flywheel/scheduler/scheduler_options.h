// The [scheduler] section of a job config: the cells of `flywheel train` and how they are given
// roles. run.mode picks the rule:
//   colocated  every cell generates a batch, then every cell trains on it (data parallel);
//   async      a static split: actor.num_actors actor threads generate while
//              learner.world_size learner ranks train (the split K is the actor count);
//   elastic    `core_cells` cells always train; the other cells (satellites) move between
//              rollout and training under `controller`: "backlog" (backlog_controller.h, the
//              default) or "water_level" (water_level.h, the first rule, kept for comparison).
// No torch: the config layer includes it.
#ifndef FLYWHEEL_SCHEDULER_SCHEDULER_OPTIONS_H_
#define FLYWHEEL_SCHEDULER_SCHEDULER_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "flywheel/core/config.h"
#include "flywheel/core/strings.h"

namespace flywheel {

struct SchedulerOptions {
  int64_t cells = 2;          // model replicas of the elastic job, each one thread
  // elastic: cells that always train; each holds a shard of the optimiser state (ZeRO-1 over
  // the core cells, streaming_learner.h)
  int64_t core_cells = 1;
  // rollout -> train: finish the cell's in-flight episodes in place instead of handing them
  // to another rollout cell at their last environment boundary.
  bool drain_on_switch = false;
  // Which controller moves the satellites: "backlog" or "water_level" (role_controller.h).
  std::string controller = "backlog";
  // The backlog controller (backlog_controller.h). A satellite is released when more than
  // release_backlog_batches batches of finished work wait to be trained (and the episodes in
  // flight fit on one rollout cell fewer), recalled when rollout has been short and less than
  // recall_backlog_batches wait; its inputs are averaged over smoothing_steps learner steps, and
  // two moves are at least move_interval_steps apart. In batches and steps, so that the same
  // defaults hold for steps of a fraction of a second and of minutes.
  double release_backlog_batches = 0.7;
  double recall_backlog_batches = 0.05;
  double smoothing_steps = 0.25;
  double move_interval_steps = 0.3;
  // Both controllers (water_level.h): a satellite moves to training when the remaining
  // work fits on one rollout cell fewer with this share of a cell's capacity to spare, and
  // stays in a role at least min_residence_seconds.
  double hysteresis = 0.25;
  double min_residence_seconds = 0.05;
  // What the water level w counts: "episodes" in flight, or "tokens" still to generate (an
  // estimate from recently finished episodes' lengths, remaining_tokens.h).
  std::string unit = "episodes";
  // Seconds between two looks of the rule at the water level.
  double tick_seconds = 0.02;
  // Every look of the controller to scheduler.jsonl (the job's and the simulator's), not only
  // those that move a cell or change its cause. The backlog controller averages every
  // observation, so only the whole sequence replays a run's decisions (a tick every
  // tick_seconds: thousands of lines a minute).
  bool log_every_decision = false;
  // Cells of other processes (`flywheel cell`): heartbeat period, and the silence after which
  // the core declares a cell dead (its micro-steps re-queued, its episodes given back).
  double heartbeat_seconds = 0.1;
  double heartbeat_timeout_seconds = 3;

  template <typename V>
  void VisitFields(V& v) {
    v.Field("cells", cells, "model replicas (threads) of the elastic job");
    v.Field("core_cells", core_cells,
            "elastic: cells that always train, each holding a shard of the optimiser state");
    VisitControllerFields(v);
    v.Field("heartbeat_seconds", heartbeat_seconds,
            "cells of other processes: seconds between two heartbeats");
    v.Field("heartbeat_timeout_seconds", heartbeat_timeout_seconds,
            "cells of other processes: silence after which a cell is declared dead");
  }

  // The keys of the controller and of its cells' moves: shared with the simulator's [scheduler]
  // (sim/sim_config.h), which takes its cells from the cluster.
  template <typename V>
  void VisitControllerFields(V& v) {
    v.Field("drain_on_switch", drain_on_switch,
            "a cell moving to training finishes its episodes in place instead of handing them "
            "to another rollout cell");
    v.Field("controller", controller,
            "what moves satellites: \"backlog\" (release when trainable work piles up, recall "
            "when rollout is short) or \"water_level\" (the first rule, for comparison)");
    v.Field("release_backlog_batches", release_backlog_batches,
            "backlog controller: release a satellite to training when more than this many "
            "batches of finished work wait to be trained");
    v.Field("recall_backlog_batches", recall_backlog_batches,
            "backlog controller: recall a satellite when rollout has been short and less than "
            "this many batches wait");
    v.Field("smoothing_steps", smoothing_steps,
            "backlog controller: average its inputs over about this many learner steps");
    v.Field("move_interval_steps", move_interval_steps,
            "backlog controller: the least time between two moves, in learner steps");
    v.Field("hysteresis", hysteresis,
            "share of one cell's capacity the remaining work must leave free before a move to "
            "training, in [0, 1)");
    v.Field("min_residence_seconds", min_residence_seconds,
            "a satellite keeps a role at least this long");
    v.Field("unit", unit,
            "what the controller counts: \"episodes\" in flight or \"tokens\" still to generate");
    v.Field("tick_seconds", tick_seconds, "seconds between two looks of the controller");
    v.Field("log_every_decision", log_every_decision,
            "write every look of the controller to scheduler.jsonl, not only the moves and "
            "changes of cause (to replay a run's decisions)");
  }

  absl::Status Validate() const {
    if (cells < 2) {
      return absl::InvalidArgumentError(StrCat(
          "scheduler.cells must be >= 2 (a core cell and a satellite), got ", cells));
    }
    if (core_cells < 1 || core_cells >= cells) {
      return absl::InvalidArgumentError(StrCat("scheduler.core_cells must be in [1, cells - 1 = ",
                                               cells - 1, "], got ", core_cells));
    }
    if (!(hysteresis >= 0 && hysteresis < 1)) {
      return absl::InvalidArgumentError("scheduler.hysteresis must be in [0, 1)");
    }
    if (controller != "backlog" && controller != "water_level") {
      return absl::InvalidArgumentError(StrCat(
          "scheduler.controller must be \"backlog\" or \"water_level\", got \"", controller, "\""));
    }
    if (!(recall_backlog_batches >= 0 && release_backlog_batches > recall_backlog_batches)) {
      return absl::InvalidArgumentError(
          StrCat("scheduler.release_backlog_batches (", release_backlog_batches,
                 ") must be above scheduler.recall_backlog_batches (", recall_backlog_batches,
                 ") >= 0"));
    }
    if (!(smoothing_steps >= 0 && move_interval_steps >= 0)) {
      return absl::InvalidArgumentError(
          "scheduler.smoothing_steps and scheduler.move_interval_steps must be >= 0");
    }
    if (unit != "episodes" && unit != "tokens") {
      return absl::InvalidArgumentError(
          StrCat("scheduler.unit must be \"episodes\" or \"tokens\", got \"", unit, "\""));
    }
    if (!(min_residence_seconds >= 0)) {
      return absl::InvalidArgumentError("scheduler.min_residence_seconds must be >= 0");
    }
    if (!(tick_seconds > 0)) return absl::InvalidArgumentError("scheduler.tick_seconds must be > 0");
    if (!(heartbeat_seconds > 0) || !(heartbeat_timeout_seconds >= 2 * heartbeat_seconds)) {
      return absl::InvalidArgumentError(
          StrCat("scheduler.heartbeat_seconds must be > 0 and heartbeat_timeout_seconds at least "
                 "two heartbeats, got ",
                 heartbeat_seconds, " and ", heartbeat_timeout_seconds));
    }
    return absl::OkStatus();
  }
};

}  // namespace flywheel

#endif  // FLYWHEEL_SCHEDULER_SCHEDULER_OPTIONS_H_
