// The process group of a multi-process learner (`flywheel learner --world-size N --rank R
// --rendezvous HOST:PORT`): the rendezvous on rank 0's TCPStore, heartbeats, and the Gloo
// communicator the LearnerSession of every rank runs on.
//
//   Join: Rendezvous (config hash = digest of the job config text: mismatches are refused)
//         ─▶ Liveness heartbeats (own store connection) ─▶ Communicator over "learner/"
//   on an error: Explain(status) names a rank that stopped ─▶ Close ─▶ exit non-zero
//
// The communicator's timeout bounds how long ranks > 0 wait for rank 0's next batch (rank 0
// may wait that long for the buffer); a killed rank is noticed at once (its sockets close).
#ifndef FLYWHEEL_RUNTIME_LEARNER_GROUP_H_
#define FLYWHEEL_RUNTIME_LEARNER_GROUP_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel {
namespace dist {
class Communicator;  // the torch headers stay in learner_group.cc
}

struct LearnerGroupOptions {
  int world_size = 1;      // --world-size
  int rank = 0;            // --rank
  std::string rendezvous;  // --rendezvous HOST:PORT (rank 0 hosts the store there)
  // Reaching the rendezvous and waiting for every rank (--connect-timeout).
  absl::Duration connect_timeout = absl::Seconds(30);
  // A collective (ranks > 0 waiting for rank 0's next batch) fails after this long.
  absl::Duration collective_timeout = absl::Minutes(5);
  // How long rank 0 keeps its store up at exit for the others to read errors and heartbeats.
  absl::Duration close_wait = absl::Seconds(3);

  absl::Status Validate() const;
};

// Applies --world-size to the config: learner.world_size must be 1 (unset: it becomes N) or N.
absl::Status ApplyWorldSize(int world_size, const std::string& config_file, JobConfig& config);

// 64-bit FNV-1a of `text`, as 16 hex digits: a digest two processes compare.
std::string TextDigest(std::string_view text);

// TextDigest(FormatJobConfig(config)): equal on every rank of one job.
std::string JobConfigHash(const JobConfig& config);

class LearnerGroup {
 public:
  static absl::StatusOr<std::unique_ptr<LearnerGroup>> Join(const LearnerGroupOptions& options,
                                                            const JobConfig& config);
  ~LearnerGroup();  // Close()

  dist::Communicator* communicator();
  int rank() const { return options_.rank; }
  // `error` (same code) with the ranks whose heartbeats stopped appended; blocks a few seconds
  // while every peer still looks alive.
  absl::Status Explain(const absl::Status& error);
  // Before exit, success or failure; idempotent.
  void Close();

 private:
  struct State;  // rendezvous, heartbeats, communicator (learner_group.cc)
  explicit LearnerGroup(LearnerGroupOptions options);

  LearnerGroupOptions options_;
  std::unique_ptr<State> state_;
  bool closed_ = false;
};

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_LEARNER_GROUP_H_
