// The core of an elastic job: the cells that always train and own the optimiser (ZeRO-1 over
// scheduler.core_cells, learner/streaming_learner.h), the feeder of each step's micro-step
// queue, and the control loop over the one control plane (control_plane.h). The same core runs
// `flywheel train` with run.mode = "elastic" (elastic_job.h: its satellites are cells on threads
// of this process) and `flywheel learner --scheduler-listen` (RunElasticCore: its satellites are
// `flywheel cell` processes).
//
//   buffer ──CoreLinks::sample──▶ feeder ──▶ MicroStepQueue ◀── core cells: claim, FinishStep,
//        ▲                                     ▲  ▲              publish (CoreLinks::publish)
//        │ cells insert          LocalChannel ─┘  └─ satellites: Join/Claim/Done/…
//   cells ── Register, Heartbeat ──▶ ControlPlane ◀── control loop: AwaitEvent ─▶ Tick
//                                     (roles, grants, switches, hand-over placement)
//
// The core publishes its weights after every step (a cell joining a step loads exactly that
// step's version) and admits episodes version-bounded (scheduler/elastic_control.h) through the
// grants of the heartbeat replies. The buffer is not told the learner version: the step's queue
// applies the staleness bound, so that no admitted group is dropped before a step (admission
// would wait for it forever).
#ifndef FLYWHEEL_ELASTIC_ELASTIC_CORE_H_
#define FLYWHEEL_ELASTIC_ELASTIC_CORE_H_

#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/core/trajectory.h"
#include "flywheel/dist/membership.h"
#include "flywheel/elastic/control_plane.h"
#include "flywheel/elastic/elastic_step_line.h"
#include "flywheel/elastic/hand_over_desk.h"
#include "flywheel/elastic/local_channel.h"
#include "flywheel/elastic/training_meter.h"
#include "flywheel/learner/checkpoint.h"
#include "flywheel/learner/streaming_learner.h"
#include "flywheel/model/transformer.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/runtime/blas_choice.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/runtime/remote_learner.h"
#include "flywheel/runtime/run_directory.h"
#include "flywheel/runtime/run_stop.h"
#include "flywheel/scheduler/micro_step_queue.h"
#include "flywheel/scheduler/remaining_tokens.h"
#include "flywheel/scheduler/scheduler_log.h"
#include "flywheel/scheduler/step_group.h"

namespace flywheel {

// What the core is connected to: the buffer, where its weights go, the step groups' store.
struct CoreLinks {
  // Up to `max_groups` complete groups, waiting at most `wait`; none yet is an empty answer.
  // kCancelled or kFailedPrecondition: the buffer closed (the job is stopping).
  std::function<absl::StatusOr<std::vector<std::vector<Trajectory>>>(int max_groups,
                                                                     absl::Duration wait)>
      sample;
  std::function<int64_t()> waiting_groups;  // complete groups in the buffer now
  // The weights a joining cell loads and a rolling-out one installs.
  std::function<absl::Status(std::shared_ptr<const WeightSnapshot>)> publish;
  c10::intrusive_ptr<c10d::Store> store;
  ModelOptions model_options;
  // Handed to `flywheel cell` processes at Register (empty in process).
  std::string store_address;
  std::string weights_address;
  absl::Duration heartbeat_interval;  // the cells' (processes: scheduler.heartbeat_seconds)
  absl::Duration group_timeout = absl::Seconds(30);  // of each step's c10d group
  bool resume = false;
  std::FILE* progress = stdout;
  bool progress_is_terminal = false;
};

// What the core's run did.
struct CoreResult {
  int64_t steps = 0;  // trained by this run
  int64_t final_step = 0;
  double last_reward = 0;
  double last_success = 0;
  double best_success = 0;
  nlohmann::json summary;  // the keys every elastic run writes
};

class ElasticCore {
 public:
  static absl::StatusOr<std::unique_ptr<ElasticCore>> Create(const JobConfig& config,
                                                             CoreLinks links);
  ~ElasticCore();  // Shutdown()

  LocalChannel& channel() { return *channel_; }
  ControlPlane& plane() { return *plane_; }
  HandOverDesk& desk() { return *desk_; }
  RunDirectory& run_dir() { return *run_dir_; }
  // The weights of core cell 0 now.
  absl::StatusOr<std::shared_ptr<const WeightSnapshot>> Snapshot() const;

  // Trains until run.max_steps or `stop`; the cells' heartbeats say "finished" from then on.
  absl::StatusOr<CoreResult> Train(const RunStop& stop);
  // Stops every thread of the core; the queue is cancelled.
  void Shutdown();
  // The run fails with `status` (the first failure is the run's): a cell's error is the job's.
  void Fail(absl::Status status);

 private:
  // A core cell: a replica with its optimiser shard.
  struct Core {
    int id = 0;
    Transformer model{nullptr};
    std::unique_ptr<StreamingLearner> learner;
    std::unique_ptr<StepGroup> group;
    std::thread thread;  // cells 1 … C−1 (cell 0 is Train's)
  };

  ElasticCore(const JobConfig& config, CoreLinks links)
      : config_(config), links_(std::move(links)) {}
  absl::Status Init();
  int cores() const { return static_cast<int>(config_.scheduler.core_cells); }
  bool Stopping() const { return stopping_.load() || (stop_ != nullptr && stop_->Reached()); }
  absl::Status FirstError() const;
  absl::Status Restore(const std::string& checkpoint);
  absl::Status SaveCheckpoint(int64_t step);
  absl::Status Publish();
  absl::Status Feed();
  absl::Status Control();
  // One streaming step on core cell `core`: claim and run micro-steps, then the reduce.
  absl::StatusOr<StreamingStepResult> RunStep(Core& core, int64_t queue_step);
  absl::Status RunCore(Core& core);  // cells 1 … C−1: join every step cell 0 begins
  nlohmann::json Summary(const CoreResult& result, double wall, double busy, int64_t consumed,
                         const std::string& stopped_by) const;

  const JobConfig config_;
  const CoreLinks links_;
  absl::Time start_;
  const RunStop* stop_ = nullptr;  // Train's
  BlasChoice blas_;
  std::unique_ptr<RunDirectory> run_dir_;
  std::unique_ptr<CheckpointManager> checkpoints_;
  std::unique_ptr<scheduler::SchedulerLog> log_;
  std::unique_ptr<dist::Membership> membership_;
  std::unique_ptr<MicroStepQueue> queue_;
  std::unique_ptr<ControlPlane> plane_;
  std::unique_ptr<LocalChannel> channel_;
  std::unique_ptr<HandOverDesk> desk_;
  std::vector<std::unique_ptr<Core>> cores_;  // [0] begins every step
  // A fresh episode's expected tokens, from the trajectories the feeder takes (token unit).
  std::unique_ptr<scheduler::RemainingTokens> remaining_;
  std::unique_ptr<TrainingMeter> meter_;
  std::thread feeder_;
  std::thread controller_;
  std::atomic<bool> stopping_{false};

  mutable absl::Mutex mu_;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, StepData> step_data_ ABSL_GUARDED_BY(mu_);  // by queue step
};

// `flywheel learner --scheduler-listen ADDR` with run.mode = "elastic": the core of a job whose
// satellites are `flywheel cell` processes (elastic_cell.h, docs/elastic.md). It serves its
// weights and the scheduler (scheduler_service.h) and samples the buffer process. One core cell:
// scheduler.core_cells > 1 runs inside `flywheel train` only.
struct ElasticCoreOptions {
  std::string buffer_address;
  std::string weights_listen = "127.0.0.1:7400";    // port 0: any free port
  std::string scheduler_listen = "127.0.0.1:7500";  // port 0: any free port
  // Token and TLS: of the buffer's client, and of the weights and scheduler services.
  RpcSecurity security;
  bool resume = false;
  absl::Duration connect_timeout = absl::Seconds(30);
  absl::Duration finished_linger = absl::Seconds(3);  // serve "finished" this long at the end
  std::FILE* progress = stdout;
  bool progress_is_terminal = false;
  // Called once both services listen: the weights' and the scheduler's addresses.
  std::function<void(const std::string&, const std::string&)> on_serving;
  const std::atomic<bool>* stop = nullptr;  // set (by a signal): end after the current step
};

absl::StatusOr<RemoteLearnerResult> RunElasticCore(const JobConfig& config,
                                                   const ElasticCoreOptions& options);

// The refusals every elastic core shares: η < 0.
absl::Status CheckElasticConfig(const JobConfig& config);

}  // namespace flywheel

#endif  // FLYWHEEL_ELASTIC_ELASTIC_CORE_H_
