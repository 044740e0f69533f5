// The elastic job's one control plane: everything the core decides about its satellite cells,
// whether they are threads of `flywheel train` (the in-process channel, local_channel.h) or
// `flywheel cell` processes (the gRPC service, scheduler_service.h, a thin adapter over the same
// channel). Torch-free: it never sees a tensor or a micro-step.
//
//   cells ── Register, Heartbeat(role, counts) ──▶ ControlPlane ◀── core: BeginStep, StepEnded
//        ◀── role, step, admit_until, finished ──  │ cells: id → role wanted / reported,
//                                                   │   counts, grant, alive?  (monitor: silence
//                                                   │   ⇒ dead, its claims requeued)
//   control loop: AwaitEvent ─▶ Tick(training, parked episodes) ─▶ placements of parked ones
//        satellite slots ─▶ ObserveCells ─▶ RoleController::Decide ─▶ roles, pending switches
//        ─▶ switch records, scheduler.jsonl ─▶ hand-over placement ─▶ GrantAdmission
//
// Satellite slots. The controller orders scheduler.cells − core_cells satellites; each slot holds
// a registered cell, given after its first heartbeat. A cell declared dead (no heartbeat for
// heartbeat_timeout) or that left frees its slot: its claimed micro-steps go back to the step's
// queue (the `requeue` callback), and the episodes it had not finished are given back to
// admission (GrantAdmission), so that live cells fill their batch. A cell that registers later
// takes the lowest free slot and the role the controller holds for it; one that finds every
// slot taken rolls out outside the controller (it is granted admission like the others).
//
// Hand-overs (in-process cells only: an episode's environment lives in the cell's process). A
// cell leaving rollout parks its suspended episodes with the core (hand_over_desk.h); each tick
// places the parked ones, before any new episode is granted, on the rolling-out cells with room
// (scheduler::PlaceEpisodes), counting each cell's grant as held: so an adopted episode never
// takes a slot a new one may start in, and never goes beyond a cell's slots. What does not fit
// stays parked for the next tick. A taker's grant grows by what it is given.
//
// Switches are timed from the decision to the first heartbeat that reports the new role; a move
// that reverses one the cell has not completed cancels it (no switch is timed).
//
// Thread-safety: every method may be called from any thread. Lock order: mu_ before the step
// queue's locks (the requeue callback and the BeginStep/AtStep functions run under mu_; the
// queue never calls back). Log lines are written outside mu_.
#ifndef FLYWHEEL_ELASTIC_CONTROL_PLANE_H_
#define FLYWHEEL_ELASTIC_CONTROL_PLANE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/elastic/elastic_switches.h"
#include "flywheel/scheduler/elastic_control.h"
#include "flywheel/scheduler/role_controller.h"
#include "flywheel/scheduler/scheduler_log.h"
#include "flywheel/scheduler/scheduler_options.h"
#include "flywheel/v1/scheduler_service.pb.h"

namespace flywheel {

struct ControlPlaneOptions {
  SchedulerOptions scheduler;             // the controller's options ([scheduler])
  scheduler::ElasticAdmission admission;  // the staleness-bounded admission
  int64_t episodes_per_cell = 1;          // a cell's episode slots (actor.episodes_in_flight)
  // Digests every cell must match at Register: of the job config and of the model.
  std::string config_hash;
  std::string model_hash;
  // Cells heartbeat this often; one silent for heartbeat_timeout is declared dead.
  absl::Duration heartbeat_interval = absl::Milliseconds(200);
  absl::Duration heartbeat_timeout = absl::Seconds(2);
  std::string store_address;    // handed to cells of other processes: the step groups' TCPStore
  std::string weights_address;  // ... and the core's weights service (empty in process)

  int core_cells() const { return static_cast<int>(scheduler.core_cells); }
  int satellites() const { return static_cast<int>(scheduler.cells - scheduler.core_cells); }
  absl::Status Validate() const;
};

// A cell as the control plane sees it (for the core, reports and tests).
struct CellInfo {
  int cell = -1;
  std::string name;
  v1::CellRole role = v1::CELL_ROLE_ROLLOUT;  // the role the core wants
  bool dead = false;
  bool left = false;     // dead because it said so (Leave with exit), not by silence
  int64_t requeued = 0;  // micro-steps sent back when it was declared dead
  absl::Time last_seen;
  // What its latest heartbeat reported.
  v1::CellRole reported_role = v1::CELL_ROLE_UNSPECIFIED;  // unspecified before the first
  int64_t dispatched = 0;
  int64_t finished = 0;
  int64_t weights_version = -1;
  double remaining_tokens = 0;
  int64_t episodes_handed = 0;    // suspended and parked with the core (cumulative)
  int64_t finished_in_place = 0;  // finished while leaving rollout (cumulative)
  // Its admission, sent in every heartbeat reply.
  int64_t admit_until = 0;
  int64_t admit_version = 0;

  bool rolling_out() const {
    return !dead && role == v1::CELL_ROLE_ROLLOUT && reported_role == v1::CELL_ROLE_ROLLOUT;
  }
};

// What the core brings to a tick.
struct TickInputs {
  scheduler::TrainingReport training;
  // A fresh episode's expected tokens (scheduler.unit = "tokens": a full cell's capacity).
  double episode_tokens = 1;
  // The KV tokens of each parked episode (hand_over_desk.h), and those given to a taker but not
  // adopted yet: both are in flight on no cell.
  std::vector<double> parked;
  int64_t delivering = 0;
};

// What the control plane has done so far (summary.json's "elastic", metrics lines).
struct ControlSummary {
  std::vector<SwitchRecord> switches;
  int64_t cells_registered = 0;
  int64_t cells_lost = 0;  // declared dead (not left)
  int satellites_training = 0;
  int64_t episodes_in_flight = 0;  // on live cells and parked, at the last tick
  int64_t episodes_handed = 0;     // parked by cells leaving rollout
  int64_t episodes_placed = 0;     // parked episodes given to a taker
  int64_t max_taker_held = 0;      // the most a taker held (granted) after a placement
};

class ControlPlane {
 public:
  // Gives `cell`'s claims of the current step back to the step's queue; how many.
  using Requeue = std::function<absl::StatusOr<int64_t>(int cell)>;

  // `log` is borrowed (null: no scheduler.jsonl) and must outlive the plane.
  static absl::StatusOr<std::unique_ptr<ControlPlane>> Create(ControlPlaneOptions options,
                                                              scheduler::SchedulerLog* log,
                                                              Requeue requeue);
  ~ControlPlane();  // Stop()

  // --- What a cell asks (local_channel.h serves the rest of its calls on the queue).
  // A fresh id (never reused) in the rollout role; kFailedPrecondition when a hash differs.
  absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& request);
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request);
  // kNotFound for an unknown cell, kFailedPrecondition for a dead one; refreshes its heartbeat.
  absl::Status CheckCell(int cell);
  // Runs `f(version, optimizer_step)` of the step under the plane's lock when `step` is the
  // current one (else kFailedPrecondition naming `what`), so that the step cannot change under it.
  absl::Status AtStep(int cell, int64_t step, const char* what,
                      absl::FunctionRef<absl::Status(int64_t, int64_t)> f);
  int64_t step() const;  // the step being filled (-1 before the first)
  // The cell leaves the job (as a death, without the wait); how many micro-steps went back.
  absl::StatusOr<int64_t> Exit(int cell);

  // --- The core's side.
  // Starts step `step` from `version` (the core's optimiser counter `optimizer_step`): `begin`
  // starts the queue's step under the plane's lock, so no heartbeat pairs the new step with a
  // role set for the old one.
  absl::Status BeginStep(int64_t step, int64_t version, int64_t optimizer_step,
                         absl::FunctionRef<absl::Status()> begin);
  // A step ended and its weights were published: admission counts `steps_done`; grants from now
  // on name `published_version`.
  void StepEnded(int64_t steps_done, int64_t optimizer_step, int64_t published_version);
  // Waits until `deadline` or an event (a cell registered, died or reached its new role; a step
  // began or ended; something was parked): the control loop's clock. Returns the event count
  // to pass next time.
  int64_t AwaitEvent(int64_t seen, absl::Time deadline) const;
  void Notify();  // an event from outside (episodes parked)
  // One controller tick at `now`. Returns, per parked episode, the cell that takes it (-1: it
  // stays parked).
  absl::StatusOr<std::vector<int>> Tick(absl::Time now, const TickInputs& inputs);
  void SetStart(absl::Time start);  // "at_s" of the log lines counts from here
  void SetFinished();               // heartbeats answer finished = true from now on
  void Stop();                      // the monitor stops; AwaitEvent returns at once

  // --- Reports and tests.
  // Sets the role a cell's heartbeats carry, outside the controller (tests).
  absl::Status SetRole(int cell, v1::CellRole role);
  absl::Status SetAdmission(int cell, int64_t admit_until, int64_t admit_version);
  std::vector<CellInfo> cells() const;
  ControlSummary Summary() const;
  absl::Status AwaitDead(int cell, absl::Time deadline) const;
  absl::Status AwaitRegistered(int count, absl::Time deadline) const;
  // Blocks until every registered cell has left or was declared dead.
  absl::Status AwaitAllGone(absl::Time deadline) const;

 private:
  // A role change asked of a cell and not yet reported done by its heartbeats.
  struct PendingSwitch {
    int cell = -1;
    int satellite = 0;
    bool to_train = false;
    absl::Time asked;
    int64_t handed = 0;  // the cell's counters at the decision
    int64_t in_place = 0;
  };

  ControlPlane(ControlPlaneOptions options, scheduler::SchedulerLog* log, Requeue requeue,
               std::unique_ptr<scheduler::RoleController> roles);
  void Monitor();
  void DeclareDead(CellInfo& cell, absl::Duration silent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  nlohmann::json Event(std::string_view kind, absl::Time now) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The tick's parts, in order.
  void UpdateSlots(absl::Time now, std::vector<nlohmann::json>& lines)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<scheduler::SchedulerDecision> Decide(absl::Time now, const TickInputs& inputs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Move(const scheduler::SchedulerDecision& decision, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompleteSwitches(absl::Time now, std::vector<SwitchRecord>& done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<int> Place(const std::vector<double>& parked, absl::Time now,
                         std::vector<nlohmann::json>& lines) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Grant(int64_t in_transit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<scheduler::CellAdmission> Admissions() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const ControlPlaneOptions options_;
  scheduler::SchedulerLog* const log_;  // borrowed; may be null
  const Requeue requeue_;

  mutable absl::Mutex mu_;
  std::unique_ptr<scheduler::RoleController> roles_ ABSL_GUARDED_BY(mu_);
  std::map<int, CellInfo> cells_ ABSL_GUARDED_BY(mu_);
  int next_cell_ ABSL_GUARDED_BY(mu_);
  std::vector<int> slot_cell_ ABSL_GUARDED_BY(mu_);  // satellite slot → cell id, -1 when free
  std::vector<PendingSwitch> pending_ ABSL_GUARDED_BY(mu_);
  int64_t step_ ABSL_GUARDED_BY(mu_) = -1;  // the step being filled
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t optimizer_step_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t steps_done_ ABSL_GUARDED_BY(mu_) = 0;  // what admission counts
  int64_t published_ ABSL_GUARDED_BY(mu_) = 0;   // the version grants name
  absl::Time start_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t events_ ABSL_GUARDED_BY(mu_) = 0;
  ControlSummary summary_ ABSL_GUARDED_BY(mu_);
  std::thread monitor_;  // declares silent cells dead
};

}  // namespace flywheel

#endif  // FLYWHEEL_ELASTIC_CONTROL_PLANE_H_
