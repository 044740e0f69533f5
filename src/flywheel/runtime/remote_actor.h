// `flywheel actor`: actor threads of a job whose buffer and learner are other processes.
//
//   weights service ──GetVersion every poll_interval; FetchWeights when another──▶ poll thread
//                                                   │ PublishSnapshot (between decode steps)
//                                                   ▼
//   Actor threads (actor.num_actors, one rollout engine each) ──Insert, one ack each──▶ buffer
//
// A late-joining or restarted actor fetches the newest weights before its first episode; a
// learner that resumed from an older checkpoint (a lower version) is followed back to it. A
// full buffer delays the acks (backpressure) and the actor waits; a buffer or weights service
// that stays unreachable longer than connect_timeout ends the process with an error naming
// the address. When the learner reports its run finished, the actor stops cleanly.
#ifndef FLYWHEEL_RUNTIME_REMOTE_ACTOR_H_
#define FLYWHEEL_RUNTIME_REMOTE_ACTOR_H_

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/rpc/rpc_security.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel {

struct RemoteActorOptions {
  std::string buffer_address;
  std::string weights_address;
  RpcSecurity security;  // token and TLS for the buffer and the weights service
  // Distinguishes this process's actors (ids actor-<index>[.<thread>]) and task streams.
  int64_t actor_index = 0;
  absl::Duration connect_timeout = absl::Seconds(30);
  absl::Duration poll_interval = absl::Milliseconds(500);
  std::FILE* log = stdout;  // one line per weight swap and at the end; nullptr = none
  // Non-empty: append "<unix_ms> <trajectory id>" for every insert the buffer acknowledged,
  // flushed at once (what `flywheel chaos` checks against what was trained).
  std::string ack_log;
  const std::atomic<bool>* stop = nullptr;  // set (by a signal): stop cleanly
};

struct RemoteActorResult {
  int64_t episodes_finished = 0;
  int64_t inserted = 0;        // trajectories the buffer acknowledged
  int64_t weight_updates = 0;  // snapshots fetched after the first
  int64_t final_version = -1;
  bool learner_finished = false;  // stopped because the learner's run ended
};

absl::StatusOr<RemoteActorResult> RunRemoteActor(const JobConfig& config,
                                                 const RemoteActorOptions& options);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_REMOTE_ACTOR_H_
