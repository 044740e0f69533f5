// The learner side of a job, shared by `flywheel train` (embedded) and `flywheel learner`
// (separate process): the policy model and its LearnerStep, the run directory with its
// checkpoints (and --resume), and the per-step record both write to metrics.jsonl. Where the
// batches come from and where the weights go is the caller's business.
//
// On a group of learner ranks (learner.world_size > 1, a communicator passed to Open), every
// rank holds a session and rank 0 leads: its Step and Snapshot first broadcast a command (the
// global batch, serialized with trajectory_proto.h) so that the other ranks, looping in
// Follow(), take part in the same collectives in the same order:
//
//   rank 0:  caller ─Step(batch)──▶ broadcast "step" + batch ─▶ LearnerStep::Step ─▶ …
//            caller ─Snapshot()───▶ broadcast "snapshot" (full sharding: gather the weights)
//            caller ─Finish()─────▶ broadcast "end"
//   rank r:  Follow(): receive ─▶ LearnerStep::Step / FullParameters ─▶ … until "end"
//
// Rank 0 alone owns the run directory (config, metrics, summary, full checkpoints); with
// learner.sharding != "none" every rank writes its shard of each checkpoint into rank 0's
// checkpoint directory (sharded_checkpoint.h), which the ranks must share. --resume loads
// either kind at any world size. With world size 1 nothing is broadcast: today's single learner.
#ifndef FLYWHEEL_RUNTIME_LEARNER_SESSION_H_
#define FLYWHEEL_RUNTIME_LEARNER_SESSION_H_

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/core/trajectory.h"
#include "flywheel/dist/communicator.h"
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
  BatchDisposition disposition;  // by trajectory id: trained, dropped, held back
  bool checkpointed = false;     // a checkpoint of this step was written
  // The loss's KL-to-reference and entropy terms, aggregated as the loss is (learner.aggregation),
  // when learner.kl_coef / entropy_coef > 0 compute them.
  std::optional<double> kl;
  std::optional<double> entropy;

  // The metrics.jsonl fields every deployment writes; callers add their own (buffer, actors).
  nlohmann::json MetricsLine(int64_t version, double elapsed_seconds) const;
};

// What the caller of rank 0 adds to each step (the remote learner's lease protocol).
struct StepHooks {
  // After each trained step, before its checkpoint is written (when one is due): whatever it
  // records is then older than the checkpoint that contains the step.
  std::function<absl::Status(const TrainedStep&)> trained = nullptr;
  // Writes extra files into each checkpoint directory before it becomes visible.
  CheckpointManager::Writer checkpoint_extra = nullptr;
};

class LearnerSession {
 public:
  // Seeds torch, builds the model, opens (or with `resume` reopens) the run directory and loads
  // its newest complete checkpoint. `group` (borrowed, outlives the session; null = one
  // process) makes this session one rank of the learner group; every rank calls Open.
  static absl::StatusOr<std::unique_ptr<LearnerSession>> Open(const JobConfig& config,
                                                              const ModelOptions& model_options,
                                                              bool resume,
                                                              dist::Communicator* group = nullptr);
  // Rank 0 of a group that did not Finish() tells the others to stop (their Follow fails).
  ~LearnerSession();

  // Trains on one batch and checkpoints when due. kUnavailable when nothing in it could be
  // trained on (all too stale): fetch more. Rank 0 only on a group.
  absl::StatusOr<TrainedStep> Step(std::vector<Trajectory> batch, absl::Duration waited);
  // The weights to publish. Rank 0 only on a group.
  absl::StatusOr<std::shared_ptr<const WeightSnapshot>> Snapshot();

  // Rank 0: set before the first Step.
  void SetStepHooks(StepHooks hooks) { hooks_ = std::move(hooks); }
  // Writes a checkpoint of the current step unless one was written (or restored) for it.
  // Rank 0 only on a group (the others join through Follow).
  absl::Status Checkpoint();
  // The model being trained (its parameters are the learner's; float32 master weights).
  const Transformer& model() const { return model_; }
  // The checkpoint Open restored (empty for a new run), and the step of the newest checkpoint
  // written or restored (0 when none).
  const std::string& restored_from() const { return restored_from_; }
  int64_t last_checkpoint_step() const { return last_checkpoint_step_; }
  // What the last Step did with each trajectory (also when it failed).
  const BatchDisposition& last_disposition() const { return learner_->last_disposition(); }

  // Ranks > 0: trains on what rank 0 sends until its Finish (OK) or its failure (kAborted).
  absl::Status Follow();
  // Rank 0: ends the other ranks' Follow. No-op with one rank or once done.
  absl::Status Finish();
  bool PublishDue(int64_t step) const { return step % config_.learner.publish_every == 0; }

  // Busy (compute) and waiting seconds over this session's steps.
  double busy_seconds() const { return busy_seconds_; }
  double wait_seconds() const { return wait_seconds_; }
  ProgressSnapshot Progress(const TrainedStep& step, double elapsed_seconds, double buffer_fill,
                            double tokens_per_s) const;

  int64_t step() { return learner_->optimizer().step(); }
  int64_t version() const { return learner_->version(); }
  int rank() const { return learner_->rank(); }
  int world_size() const { return learner_->world_size(); }
  // Rank 0 only: the other ranks write nothing there.
  RunDirectory& run_dir() { return *run_dir_; }

 private:
  enum class Command : char {
    kStep = 'S',
    kSnapshot = 'P',
    kCheckpoint = 'C',
    kEnd = 'E',
    kAbort = 'A'
  };

  explicit LearnerSession(const JobConfig& config) : config_(config) {}
  absl::Status OpenGroup(dist::Communicator* group, bool resume);
  absl::Status Restore(const std::string& checkpoint, ParallelContext parallel,
                       PolicyForward forward);
  // Rank 0 of a group: sends `command` (and the batch of kStep) to the other ranks.
  absl::Status Broadcast(Command command, const std::vector<Trajectory>* batch);
  absl::StatusOr<TrainedStep> Train(std::vector<Trajectory> batch, absl::Duration waited);
  absl::Status SaveCheckpoint(int64_t step);
  // learner.kl_coef > 0, before the first step: every rank freezes the KL term's reference model
  // π_ref, the policy as reinforcement learning starts (after the warm start), or with --resume
  // the one the run started from, kept in the run directory.
  absl::Status FreezeReference();
  bool leads() const { return group_ != nullptr && group_->size() > 1 && group_->rank() == 0; }

  const JobConfig config_;
  Transformer model_{nullptr};
  // The learner group (borrowed), or owned_group_: a group of one for sharding in one process.
  dist::Communicator* group_ = nullptr;
  std::unique_ptr<dist::Communicator> owned_group_;
  bool opened_ = false;    // Open succeeded on every rank: the others are in Follow
  bool finished_ = false;  // rank 0: Finish() sent "end"
  std::unique_ptr<RunDirectory> run_dir_;  // rank 0 only
  std::unique_ptr<CheckpointManager> checkpoints_;
  std::unique_ptr<LearnerStep> learner_;
  Transformer reference_{nullptr};  // kl_coef > 0, from the first step
  double busy_seconds_ = 0;
  double wait_seconds_ = 0;
  StepHooks hooks_;  // rank 0
  std::string restored_from_;
  int64_t last_checkpoint_step_ = 0;
};

// Rank `rank` (> 0) of a learner group whose ranks are threads of one process (the embedded job,
// `flywheel sim calibrate`): trains on the batches rank 0 sends until rank 0 finishes. One
// intra-op thread per rank, so that N ranks on N cores do not oversubscribe them.
absl::Status RunFollowerRank(c10::intrusive_ptr<c10d::Store> store, int rank,
                             const JobConfig& config, const ModelOptions& model_options,
                             bool resume);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_LEARNER_SESSION_H_
