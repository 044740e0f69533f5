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
