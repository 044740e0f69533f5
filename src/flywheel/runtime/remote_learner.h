// `flywheel learner`: the learner of a job whose actors and buffer are other processes.
//
//   buffer process ──Sample(whole groups, gRPC)──▶ LearnerStep ──▶ metrics.jsonl, checkpoints
//         ▲ SetLearnerVersion                           │ every learner.publish_every steps
//         └─────────────────────────────────────────────┤
//                                                       ▼
//                       WeightsServer (--weights-listen) ──GetVersion / FetchWeights──▶ actors
//
// The learner never waits for a particular actor: it takes whatever groups the buffer
// releases, so an actor that dies only slows the data down (its unfinished groups are
// completed by the straggler rules of the buffer or expire). On a learner group (`group`,
// learner.world_size > 1) rank 0 is all of the above and sends each batch to the other ranks
// (learner_session.h); ranks > 0 reach no buffer and serve no weights: they train on what rank
// 0 sends and return when it ends. When the run ends (run.max_steps,
// run.max_wall_seconds or a stop request) the weights service reports finished for a short
// while, so that actors stop cleanly, and then closes.
//
// Leases (docs/reliability.md): the learner samples with its run name as lease owner, so the
// buffer keeps what it handed out until acknowledged. Protocol:
//   1. after each step, the step's trained and dropped ids become pending (learner_leases.h)
//      and are appended to consumed.jsonl (consumed_log.h), before the step's checkpoint;
//   2. each checkpoint records the pending ids (leases.json); once it is complete they are
//      acknowledged (deleted in the buffer); a failed acknowledgement is retried at the next;
//   3. on start (--resume or not) the checkpoint's pending ids are acknowledged, then every
//      other lease of the run is released: what was trained after that checkpoint was rolled
//      back with the weights and is delivered again;
//   4. an id delivered while held (the buffer restarted and lost its leases) is skipped;
//   5. a sample call that failed may have leased items that never arrived: every lease but
//      the held ones is released; a clean stop writes a last checkpoint and acknowledges.
#ifndef FLYWHEEL_RUNTIME_REMOTE_LEARNER_H_
#define FLYWHEEL_RUNTIME_REMOTE_LEARNER_H_

#include <atomic>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/rpc/rpc_security.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel {
namespace dist {
class Communicator;  // dist/communicator.h (torch): kept out of this torch-free header
}

struct RemoteLearnerOptions {
  std::string buffer_address;                     // host:port of `flywheel serve buffer`
  std::string weights_listen = "127.0.0.1:7400";  // port 0: any free port
  RpcSecurity security;  // token and TLS: of the buffer's client and of the weights service
  bool resume = false;
  absl::Duration connect_timeout = absl::Seconds(30);  // also: how long the buffer may vanish
  absl::Duration finished_linger = absl::Seconds(3);   // serve "finished" this long at the end
  std::FILE* progress = stdout;
  bool progress_is_terminal = false;
  // Called once the weights service listens, with the address it bound.
  std::function<void(const std::string&)> on_serving;
  const std::atomic<bool>* stop = nullptr;  // set (by a signal): end after the current step
  // This process's rank of the learner group (borrowed, outlives the call); null = one rank.
  dist::Communicator* group = nullptr;
  // Sample with leases (above). Off: sampled items leave the buffer at once, and a learner
  // killed before its next checkpoint loses them (for tests that must see that happen).
  bool leases = true;
};

struct RemoteLearnerResult {
  int64_t steps = 0;
  int64_t final_step = 0;
  double last_reward = 0;
  double last_success = 0;
  bool stopped = false;  // ended by a stop request
  nlohmann::json summary;
};

absl::StatusOr<RemoteLearnerResult> RunRemoteLearner(const JobConfig& config,
                                                     const RemoteLearnerOptions& options);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_REMOTE_LEARNER_H_
