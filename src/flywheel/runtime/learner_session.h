// The learner side of a job, shared by `flywheel train` (embedded) and `flywheel learner`
// (separate process): the policy model and its LearnerStep, the run directory with its
// checkpoints (and --resume), and the per-step record both write to metrics.jsonl. Where the
// batches come from and where the weights go is the caller's business.
#ifndef FLYWHEEL_RUNTIME_LEARNER_SESSION_H_
#define FLYWHEEL_RUNTIME_LEARNER_SESSION_H_

#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/core/trajectory.h"
#include "flywheel/learner/checkpoint.h"
#include "flywheel/learner/learner_step.h"
#include "flywheel/model/transformer.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/runtime/progress.h"
#include "flywheel/runtime/run_directory.h"

namespace flywheel {

// One optimiser step and what the batch behind it looked like.
struct TrainedStep {
  LearnerStepResult result;
  int64_t trajectories = 0;
  double reward_mean = 0;
  double success_rate = 0;  // share of trajectories with reward >= run.success_reward
  double wait_seconds = 0;  // waiting for the batch
  double lag_mean = 0;      // learner version − oldest token version, over trained trajectories
  int64_t lag_max = 0;

  // The metrics.jsonl fields every deployment writes; callers add their own (buffer, actors).
  nlohmann::json MetricsLine(int64_t version, double elapsed_seconds) const;
};

class LearnerSession {
 public:
  // Seeds torch, builds the model, opens (or with `resume` reopens) the run directory and loads
  // its newest complete checkpoint.
  static absl::StatusOr<std::unique_ptr<LearnerSession>> Open(const JobConfig& config,
                                                              const ModelOptions& model_options,
                                                              bool resume);

  // Trains on one batch and checkpoints when due. kUnavailable when nothing in it could be
  // trained on (all too stale): fetch more.
  absl::StatusOr<TrainedStep> Step(std::vector<Trajectory> batch, absl::Duration waited);
  absl::StatusOr<std::shared_ptr<const WeightSnapshot>> Snapshot() const;
  bool PublishDue(int64_t step) const { return step % config_.learner.publish_every == 0; }

  // Busy (compute) and waiting seconds over this session's steps.
  double busy_seconds() const { return busy_seconds_; }
  double wait_seconds() const { return wait_seconds_; }
  ProgressSnapshot Progress(const TrainedStep& step, double elapsed_seconds, double buffer_fill,
                            double tokens_per_s) const;

  int64_t step() { return learner_->optimizer().step(); }
  int64_t version() const { return learner_->version(); }
  RunDirectory& run_dir() { return *run_dir_; }

 private:
  explicit LearnerSession(const JobConfig& config) : config_(config) {}
  absl::Status SaveCheckpoint(int64_t step);

  const JobConfig config_;
  Transformer model_{nullptr};
  std::unique_ptr<RunDirectory> run_dir_;
  std::unique_ptr<CheckpointManager> checkpoints_;
  std::unique_ptr<LearnerStep> learner_;
  double busy_seconds_ = 0;
  double wait_seconds_ = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_LEARNER_SESSION_H_
