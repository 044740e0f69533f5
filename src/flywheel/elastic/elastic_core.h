// `flywheel learner --scheduler-listen ADDR` with run.mode = "elastic": the core cell of an
// elastic job whose satellites are `flywheel cell` processes (elastic_cell.h, docs/elastic.md).
//
//   buffer process ──SampleGroups──▶ feeder ──▶ MicroStepQueue ◀── core cell (this thread):
//        ▲                                            ▲             claims, FinishStep, publish
//        │ cells insert                               │ Join/Claim/Done/AwaitParticipants/Leave
//   cell processes ── Register, Heartbeat ──▶ SchedulerService ◀── controller thread:
//        │                                      roles, grants        water-level rule over the
//        └── FetchWeights ──▶ WeightsServer                          satellite slots, admission
//
// Satellite slots. The rule (water_level.h) orders scheduler.cells − 1 satellites; each slot
// holds a registered cell. A cell declared dead (no heartbeat for
// scheduler.heartbeat_timeout_seconds) or that left frees its slot: its claimed micro-steps are
// re-queued by the service, and the episodes it had not finished are given back to admission
// (GrantAdmission), so that live cells fill their batch. A cell that registers later takes the
// lowest free slot and the role the rule has for it.
//
// The core publishes its weights after every step (a cell joining a step loads exactly that
// step's version from the weights service) and admits episodes as the elastic job does
// (version-bounded, elastic_control.h), through the grants of the heartbeat replies. The buffer
// is not told the learner version: the step's queue applies the staleness bound, so that no
// admitted group is dropped before a step (admission would wait for it forever).
//
// One core cell: scheduler.core_cells > 1 runs inside `flywheel train` only.
#ifndef FLYWHEEL_ELASTIC_ELASTIC_CORE_H_
#define FLYWHEEL_ELASTIC_ELASTIC_CORE_H_

#include <atomic>
#include <cstdio>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/runtime/remote_learner.h"

namespace flywheel {

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

}  // namespace flywheel

#endif  // FLYWHEEL_ELASTIC_ELASTIC_CORE_H_
