// `flywheel cell`: a satellite cell of an elastic job as its own process (docs/elastic.md). It
// holds one model replica, a rollout actor and a streaming trainer, and takes the role the
// core's scheduler gives it in every heartbeat reply:
//
//   core process (flywheel learner --scheduler-listen)        this process
//   ┌ SchedulerService ◀──── Register (config, model hash) ── ElasticCell
//   │   role, admit_until ── Heartbeat (role, started,       │  rollout: Actor → buffer (gRPC),
//   │                          finished, weights version) ─▶ │    newest weights from the core's
//   │   Join/Claim/Done/AwaitParticipants/Leave ◀──────────  │    weights service
//   ├ WeightsService ◀── Fetch ─────────────────────────────  │  train: claims micro-steps of the
//   └ TCPStore ◀── the step's c10d group (StepGroup) ───────  │    running step, reduces with the
//                                                             │    step's participants
//
// Switching never restarts the process. rollout → train: the actor stops starting episodes and
// its in-flight ones finish in place into the buffer (episodes cannot be handed to another
// process: their environments live here), then the cell joins the running step with the core's
// weights of that step. train → rollout: the cell finishes the micro-step it runs, leaves the
// step (its claims go back when it ran none) or reduces it, and installs the newest weights in
// its engine. Each switch is timed from the heartbeat that asked for it to the first heartbeat
// sent in the new role (which the core also times, from its decision).
//
// Admission is the core's: the cell starts an episode only within the reply's admit_until and
// once its engine holds the reply's admit_version.
//
// The cell ends when the core says the run finished (exit 0), on a stop request (it tells the
// core it leaves), or on an error (the core declares it dead after the heartbeat timeout and
// re-queues its micro-steps).
#ifndef FLYWHEEL_ELASTIC_ELASTIC_CELL_H_
#define FLYWHEEL_ELASTIC_ELASTIC_CELL_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/model/model_options.h"
#include "flywheel/rpc/rpc_security.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel {

struct ElasticCellOptions {
  std::string scheduler_address;  // the core's --scheduler-listen
  std::string buffer_address;     // `flywheel serve buffer`
  RpcSecurity security;  // token and TLS for the scheduler, the buffer and the weights service
  // How long the core or the buffer may be unreachable (at the start and later).
  absl::Duration connect_timeout = absl::Seconds(30);
  std::FILE* log = stdout;                  // a line per switch and at the end; nullptr = none
  const std::atomic<bool>* stop = nullptr;  // set (by a signal): leave cleanly
};

struct ElasticCellResult {
  int cell = -1;                  // the id the core gave it
  int64_t episodes_inserted = 0;  // trajectories the buffer acknowledged
  int64_t episodes_failed = 0;
  int64_t steps_trained = 0;  // learner steps it took part in (reduced)
  int64_t micro_steps = 0;    // run by this cell
  int64_t switches = 0;
  bool core_finished = false;  // ended because the core's run ended
};

absl::StatusOr<ElasticCellResult> RunElasticCell(const JobConfig& config,
                                                 const ElasticCellOptions& options);

// The digest of the model's architecture (the core's and every cell's must be equal; the job
// config's digest is JobConfigHash).
std::string ElasticModelHash(const ModelOptions& model);

}  // namespace flywheel

#endif  // FLYWHEEL_ELASTIC_ELASTIC_CELL_H_
