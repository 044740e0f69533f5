// A satellite cell of an elastic job (docs/elastic.md): one model replica, a rollout actor and a
// streaming trainer, taking the role the core's control plane gives it in every heartbeat reply.
// The same body runs as a thread of `flywheel train` (over the in-process channel, with the
// core's buffer and weights in memory) and as `flywheel cell` (over gRPC):
//
//   core (control_plane.h)                        ElasticCell
//   ┌ CellChannel ◀──── Register (config, model) ─ rollout: Actor → links.insert (the buffer),
//   │   role, admit_until ── Heartbeat (role,    │   newest weights from links' WeightsSource
//   │     dispatched, finished, handed, …) ────▶ │ train: claims micro-steps of the running
//   │   Join/Claim/Done/AwaitParticipants/Leave  │   step, reduces with its participants
//   ├ WeightsSource: the weights service, or the core's published weights in process
//   └ the step groups' store: the core's TCPStore, or the job's HashStore in process
//
// Switching never restarts anything. rollout → train: the actor stops starting episodes; with a
// hand-over desk (cells of one process) its in-flight ones are suspended at their last
// environment boundary and parked with the core, which places them on cells with room;
// otherwise (processes: an episode's environment lives here; or scheduler.drain_on_switch) they
// finish in place into the buffer. Then the cell joins the running step with the core's weights
// of that step. train → rollout: the cell finishes the micro-step it runs, leaves the step (its
// claims go back when it ran none) or reduces it, and installs the newest weights in its engine.
//
// Admission is the core's: the cell starts an episode only within the reply's admit_until
// (counting the episodes it adopted and not those it handed over) and once its engine holds the
// reply's admit_version.
//
// The cell ends when the core says the run finished, on a stop request (it tells the core it
// leaves), or on an error (the core declares it dead after the heartbeat timeout and re-queues
// its micro-steps). At the end its actor is suspended once more, so that the episodes still in
// flight are counted (episodes_cancelled_at_stop).
#ifndef FLYWHEEL_ELASTIC_ELASTIC_CELL_H_
#define FLYWHEEL_ELASTIC_ELASTIC_CELL_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/actor/actor.h"
#include "flywheel/dist/membership.h"
#include "flywheel/elastic/cell_channel.h"
#include "flywheel/elastic/hand_over_desk.h"
#include "flywheel/elastic/scheduler_client.h"
#include "flywheel/env/env_executor.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/env/task_source.h"
#include "flywheel/learner/streaming_learner.h"
#include "flywheel/model/model_options.h"
#include "flywheel/model/transformer.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/rpc/rpc_security.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/runtime/policy_text.h"
#include "flywheel/scheduler/remaining_tokens.h"
#include "flywheel/scheduler/step_group.h"

namespace flywheel {

// Where a cell gets the core's weights.
class WeightsSource {
 public:
  virtual ~WeightsSource() = default;
  // The newest weights when newer than `have_version` (-1: any); null when there is none newer.
  virtual absl::StatusOr<std::shared_ptr<const WeightSnapshot>> Newer(int64_t have_version) = 0;
};

// The core's weights in its own process: what it published last.
class PublishedWeights final : public WeightsSource {
 public:
  void Publish(std::shared_ptr<const WeightSnapshot> snapshot);
  absl::StatusOr<std::shared_ptr<const WeightSnapshot>> Newer(int64_t have_version) override;

 private:
  absl::Mutex mu_;
  std::shared_ptr<const WeightSnapshot> latest_ ABSL_GUARDED_BY(mu_);
};

// What a cell is connected to. Borrowed pointers must outlive the cell.
struct CellLinks {
  CellChannel* scheduler = nullptr;
  std::string name;  // shown in the core's log ("host:pid", "cell thread 2")
  // After registering: the step groups' store and the weights, from the core's reply.
  std::function<absl::StatusOr<c10::intrusive_ptr<c10d::Store>>(const v1::RegisterResponse&)>
      connect_store;
  std::function<absl::StatusOr<std::shared_ptr<WeightsSource>>(const v1::RegisterResponse&)>
      connect_weights;
  TrajectorySink insert;  // the buffer
  // Cells of one process: where a cell leaving rollout parks its episodes (null: they finish in
  // place, as scheduler.drain_on_switch does).
  HandOverDesk* desk = nullptr;
  // The environments, tokenizer and turn format (shared by the cells of one process).
  const EnvFactory* factory = nullptr;
  EnvExecutor* executor = nullptr;
  const PolicyText* text = nullptr;
  ModelOptions model_options;
  uint64_t seed = 0;  // of its tasks and sampling: differs per cell and per start
  absl::Duration connect_timeout = absl::Seconds(30);  // how long the core may be unreachable
  std::FILE* log = nullptr;                 // a line per switch and at the end; nullptr = none
  const std::atomic<bool>* stop = nullptr;  // set (by a signal): leave cleanly
};

struct ElasticCellResult {
  int cell = -1;                    // the id the core gave it
  int64_t episodes_dispatched = 0;  // started from its own tasks
  int64_t episodes_inserted = 0;    // trajectories the buffer acknowledged
  int64_t episodes_failed = 0;
  int64_t episodes_cancelled_at_stop = 0;  // in flight here when the run ended
  int64_t tokens_generated = 0;
  int64_t tokens_discarded = 0;
  int64_t steps_trained = 0;  // learner steps it took part in (reduced)
  int64_t micro_steps = 0;    // run by this cell
  int64_t switches = 0;
  bool core_finished = false;  // ended because the core's run ended
};

class ElasticCell {
 public:
  // Registers with the core and builds the replica, the trainer and the actor.
  static absl::StatusOr<std::unique_ptr<ElasticCell>> Create(const JobConfig& config,
                                                             CellLinks links);
  ~ElasticCell();

  int id() const { return cell_; }
  // Follows the core's roles until the run ends (or a stop request, or an error).
  absl::StatusOr<ElasticCellResult> Run();

 private:
  ElasticCell(const JobConfig& config, CellLinks links)
      : config_(config), links_(std::move(links)) {}
  absl::Status Init();
  bool StopRequested() const { return links_.stop != nullptr && links_.stop->load(); }
  void Log(const std::string& line);
  // The latest heartbeat reply; waits out a core that is briefly unreachable.
  absl::StatusOr<v1::HeartbeatResponse> Latest();
  void Report(v1::HeartbeatRequest& request);
  // Episodes started here or adopted, less those handed over.
  int64_t Dispatched() const;
  absl::Status Insert(Trajectory trajectory);
  // One look of the rollout role: weights, admission, adopted episodes, the actor's health.
  absl::Status RollOut(const v1::HeartbeatResponse& hb);
  absl::Status StartActor();
  // rollout → train: no new episodes; the in-flight ones are handed over or finish in place.
  absl::Status StopActor();
  // One learner step in the train role (returns early when the role changes); `current` is the
  // step the latest heartbeat named.
  absl::Status TrainStep(int64_t current);
  void Switched(bool to_train, absl::Time asked, const std::string& detail);
  void Finish();

  const JobConfig config_;
  CellLinks links_;
  v1::RegisterResponse registration_;
  int cell_ = -1;
  std::unique_ptr<HeartbeatSender> beats_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::unique_ptr<dist::Membership> membership_;
  std::unique_ptr<StepGroup> group_;
  std::shared_ptr<WeightsSource> weights_;
  Transformer model_{nullptr};
  std::unique_ptr<StreamingLearner> learner_;
  std::unique_ptr<TaskSource> tasks_;
  std::unique_ptr<Actor> actor_;
  std::thread actor_thread_;
  // The token unit's estimate from this cell's finished episodes (heartbeats report it).
  std::unique_ptr<scheduler::RemainingTokens> remaining_;
  absl::Time weights_polled_ = absl::InfinitePast();
  int64_t joinable_after_ = -1;  // a step this cell could not join: wait for a later one

  std::atomic<bool> stopping_{false};
  std::atomic<bool> ready_{false};                // the actor exists: heartbeats report its counts
  std::atomic<int> role_{v1::CELL_ROLE_ROLLOUT};  // the role the cell is in now
  std::atomic<int64_t> engine_version_{-1};       // the snapshot the engine was given last
  std::atomic<int64_t> admit_until_{0};
  std::atomic<int64_t> inserted_{0};
  std::atomic<int64_t> adopted_{0};   // episodes taken over from other cells
  std::atomic<int64_t> handed_{0};    // episodes parked with the core for other cells
  std::atomic<int64_t> in_place_{0};  // episodes that finished while leaving rollout
  absl::Mutex mu_;
  absl::Status actor_status_ ABSL_GUARDED_BY(mu_);
  bool actor_running_ ABSL_GUARDED_BY(mu_) = false;
  ElasticCellResult result_;
};

// `flywheel cell`: a cell as its own process (cli/cell_command.cc).
struct ElasticCellOptions {
  std::string scheduler_address;  // the core's --scheduler-listen
  std::string buffer_address;     // `flywheel serve buffer`
  RpcSecurity security;  // token and TLS for the scheduler, the buffer and the weights service
  // How long the core or the buffer may be unreachable (at the start and later).
  absl::Duration connect_timeout = absl::Seconds(30);
  std::FILE* log = stdout;                  // a line per switch and at the end; nullptr = none
  const std::atomic<bool>* stop = nullptr;  // set (by a signal): leave cleanly
};

absl::StatusOr<ElasticCellResult> RunElasticCell(const JobConfig& config,
                                                 const ElasticCellOptions& options);

// The digest of the model's architecture (the core's and every cell's must be equal; the job
// config's digest is JobConfigHash).
std::string ElasticModelHash(const ModelOptions& model);

}  // namespace flywheel

#endif  // FLYWHEEL_ELASTIC_ELASTIC_CELL_H_
