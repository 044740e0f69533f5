// What the elastic controller knows of the training side (scheduler::TrainingReport), measured
// by the core: the backlog (finished work that can be trained now) and what one training cell
// takes to train one unit of it. The backlog controller (scheduler/backlog_controller.h)
// compares the backlog, in batches, with its release and recall thresholds, and times its
// averages by the step's duration, which before the first step is the training cost of a batch;
// both figures come from what the run did, never from a configured guess.
//
//   cells ── finished episodes ──▶ buffer ── feeder: Sampled ──▶ running step ── StepDone
//                                  waiting: its complete groups    untrained: its packed
//                                                                  micro-steps not run yet
//   backlog = waiting + untrained, in episodes or in trainable tokens (scheduler.unit)
//   train_seconds_per_unit = the core's compute seconds over the units it ran, smoothed over
//                            steps; 0 until a step is done
//   micro_steps            = the micro-steps of a step (all participants'), smoothed likewise
//
// Only trainable work counts: an episode whose group is not complete, or a group the running
// step holds until a micro-batch's worth arrives, waits for more rollouts, not for a trainer.
// Counting them would keep every satellite training while the step waits for data nobody
// generates. In tokens, the waiting episodes count with the mean trainable tokens of the
// episodes sampled so far (the buffer does not report its tokens).
//
// Thread-safety: every method may be called from any thread (the feeder, the training thread
// and the controller each call their own).
#ifndef FLYWHEEL_ELASTIC_TRAINING_METER_H_
#define FLYWHEEL_ELASTIC_TRAINING_METER_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/scheduler/elastic_control.h"

namespace flywheel {

// The running step as its queue reports it (StepReport), in both units.
struct RunningStep {
  int64_t episodes = 0;     // trajectories added to the step (kept)
  int64_t tokens = 0;       // their trainable tokens
  int64_t micro_steps = 0;  // packed so far
  int64_t done = 0;         // of those, run
};

// One completed step, as the core cell ran it.
struct MeteredStep {
  double compute_seconds = 0;    // the core cell's forward, backward and optimiser time
  int64_t cell_micro_steps = 0;  // run by the core cell
  int64_t micro_steps = 0;       // run by all participants
  int64_t episodes = 0;          // trained in the step
  int64_t tokens = 0;            // their trainable tokens
};

class TrainingMeter {
 public:
  // `batch_episodes`: a learner step's episodes (run.batch_groups x actor.group_size), the
  // backlog controller's measure of the backlog.
  TrainingMeter(scheduler::WorkUnit unit, int64_t batch_episodes)
      : unit_(unit), batch_episodes_(batch_episodes) {}

  // The feeder took `episodes` finished episodes (`tokens` trainable tokens) from the buffer.
  void Sampled(int64_t episodes, int64_t tokens);
  void StepDone(const MeteredStep& step);
  // `waiting`: episodes of the complete groups the buffer holds.
  scheduler::TrainingReport Report(int64_t waiting, const RunningStep& running) const;

 private:
  // The weight of the latest step in the smoothed seconds per unit: about the last ten steps.
  static constexpr double kSmoothing = 0.1;

  const scheduler::WorkUnit unit_;
  const int64_t batch_episodes_;
  mutable absl::Mutex mu_;
  int64_t sampled_episodes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sampled_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  double seconds_ ABSL_GUARDED_BY(mu_) = 0;  // smoothed sums: seconds over units
  double units_ ABSL_GUARDED_BY(mu_) = 0;
  double micro_steps_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_ELASTIC_TRAINING_METER_H_
