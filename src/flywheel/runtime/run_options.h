// Job-level knobs: the [run] section of a job config.
#ifndef FLYWHEEL_RUNTIME_RUN_OPTIONS_H_
#define FLYWHEEL_RUNTIME_RUN_OPTIONS_H_

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "flywheel/core/config.h"

namespace flywheel {

// async: actors and learner overlap, bounded by buffer.max_staleness.
// colocated: the synchronous baseline — generate a batch, wait for it, train, publish, repeat.
// elastic: scheduler.cells model replicas; core cells always train, satellites move between
// rollout and training under the water-level rule (elastic/elastic_job.h).
enum class TrainMode { kAsync, kColocated, kElastic };
inline constexpr config::ChoiceName<TrainMode> kTrainModeNames[] = {
    {"async", TrainMode::kAsync},
    {"colocated", TrainMode::kColocated},
    {"elastic", TrainMode::kElastic}};

struct RunOptions {
  std::string name = "default";
  std::string runs_dir = "runs";
  TrainMode mode = TrainMode::kAsync;
  int64_t seed = 1;
  int64_t max_steps = 100;          // learner optimiser steps
  double max_wall_seconds = 0;      // 0 = no wall-clock limit
  int64_t batch_groups = 4;         // task groups (of actor.group_size rollouts) per learner step
  double success_reward = 1.0;      // an episode succeeds when its final reward reaches this
  int64_t eval_episodes = 0;        // after training, play this many with the final weights
  double max_pipeline_batches = 0;  // async admission control; 0 = off (see VisitFields)
  double oversample = 0;            // colocated: extra groups started per step, a fraction
  int64_t blas_threads = 0;         // OpenBLAS pool size of this process; 0 = auto (blas_choice.h)
  double emulated_slowdown = 1;     // benchmarks: compute takes this many times as long (1 = off)
  bool trace = false;               // write runs/<name>/trace.json (observe/trace_recorder.h)
  int64_t trace_spans_per_track = 16384;  // newest spans kept per trace track

  // Groups a colocated step starts: the batch and what run.oversample adds.
  int64_t colocated_groups() const {
    return batch_groups +
           static_cast<int64_t>(std::ceil(static_cast<double>(batch_groups) * oversample));
  }

  template <typename V>
  void VisitFields(V& v) {
    v.Field("name", name, "run directory name under runs_dir");
    v.Field("runs_dir", runs_dir, "parent of run directories");
    v.Choice(
        "mode", mode, kTrainModeNames,
        "async = decoupled; colocated = synchronous baseline; elastic = cells that move between "
        "rollout and training ([scheduler])");
    v.Field("seed", seed, "seed for tasks, sampling and initialisation");
    v.Field("max_steps", max_steps, "stop after this many learner steps");
    v.Field("max_wall_seconds", max_wall_seconds, "stop after this long; 0 = no limit");
    v.Field("batch_groups", batch_groups, "task groups (of actor.group_size) per learner step");
    v.Field("success_reward", success_reward, "final reward at which an episode counts as solved");
    v.Field("max_pipeline_batches", max_pipeline_batches,
            "async: actors start episodes only while those in flight plus those waiting to be "
            "trained on are fewer than this many learner batches; 0 = off");
    v.Field("oversample", oversample,
            "colocated: each step starts batch_groups x (1 + this) groups, trains on the first "
            "batch_groups to finish and drops the rest (their episodes are cut at their next "
            "environment boundary); 0 = off");
    v.Field("eval_episodes", eval_episodes,
            "after training, evaluate the final policy on this many episodes; 0 = off");
    v.Field("blas_threads", blas_threads,
            "OpenBLAS threads of this process; 0 = auto: 1 for train and actor, measured for "
            "a separate learner");
    v.Field("emulated_slowdown", emulated_slowdown,
            "benchmarks: every rollout and learner computation is followed by a wait of "
            "(f - 1) times its duration, emulating devices f times slower than a core so that "
            "more cells than cores fit (core/emulated_device.h); 1 = off");
    v.Field("trace", trace,
            "record a timeline of every thread (generate, env, insert, sample, pack, forward, "
            "backward, optimizer, publish, swap, role switches) and write it at the end of the "
            "run as runs/<name>/trace.json, a Chrome trace for ui.perfetto.dev");
    v.Field("trace_spans_per_track", trace_spans_per_track,
            "run.trace: the newest spans kept per track (thread and category); older ones are "
            "dropped and counted, so the file stays under about tracks x this x 100 bytes");
  }

  absl::Status Validate() const {
    if (name.empty() || name.find('/') != std::string::npos) {
      return absl::InvalidArgumentError("run.name must be a non-empty name without '/'");
    }
    if (batch_groups < 1) return absl::InvalidArgumentError("run.batch_groups must be >= 1");
    if (max_steps <= 0) return absl::InvalidArgumentError("run.max_steps must be > 0");
    if (max_pipeline_batches < 0) {
      return absl::InvalidArgumentError("run.max_pipeline_batches must be >= 0 (0 = off)");
    }
    if (!(oversample >= 0)) {
      return absl::InvalidArgumentError("run.oversample must be >= 0 (0 = off)");
    }
    if (oversample > 0 && mode != TrainMode::kColocated) {
      return absl::InvalidArgumentError(
          "run.oversample applies to run.mode = \"colocated\" (async's pipeline has no batch to "
          "over-sample); set it to 0 or run colocated");
    }
    if (eval_episodes < 0) return absl::InvalidArgumentError("run.eval_episodes must be >= 0");
    if (blas_threads < 0) {
      return absl::InvalidArgumentError("run.blas_threads must be >= 0 (0 = auto)");
    }
    if (max_wall_seconds < 0) {
      return absl::InvalidArgumentError("run.max_wall_seconds must be >= 0");
    }
    if (trace_spans_per_track < 1) {
      return absl::InvalidArgumentError("run.trace_spans_per_track must be >= 1");
    }
    if (!(emulated_slowdown >= 1)) {
      return absl::InvalidArgumentError("run.emulated_slowdown must be >= 1 (1 = off)");
    }
    return absl::OkStatus();
  }
};

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_RUN_OPTIONS_H_
