// External environments: N copies of a user command speaking docs/env-protocol.md.
//
//   EnvFactory ── owns ──▶ ProcessPool: slots[0..copies) each holding one Subprocess (or none
//        │                  after a failure: restarted, with a handshake, by the next Acquire)
//        └─ NewEnvironment ─▶ ProcessEnv (one per episode slot) ── Reset: lease a slot
//                                                               └─ Close / failure: return it
//
// A misbehaving process never stops training; it ends its episode:
//   crash (stdout closed, write failed)  → env-error; the slot is restarted for the next episode
//   no reply within step_timeout          → timeout, with a partial score if the process still
//                                           answers "score" within score_timeout; else restarted
//   a reply that is not valid protocol    → protocol-error quoting the line; restarted
//   an {"type":"error"} reply             → env-error; the process is kept (it is in sync)
//   an observation over max_observation_bytes → truncated, counted, the episode goes on
// Each is counted in metrics (env.process.*) and logged at warn the first time per kind (then
// every 100th, with the count), naming the command, pid, exit status and stderr tail.
#ifndef FLYWHEEL_ENV_PROCESS_PROCESS_ENV_H_
#define FLYWHEEL_ENV_PROCESS_PROCESS_ENV_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/core/metrics.h"
#include "flywheel/env/env_options.h"
#include "flywheel/env/interface.h"
#include "flywheel/env/process/protocol.h"
#include "flywheel/env/process/subprocess.h"

namespace flywheel {

// Thread-safe.
class ProcessPool {
 public:
  // Starts every copy and checks its hello; fails (naming the command) if any cannot start, so
  // a wrong command is found before training begins.
  static absl::StatusOr<std::shared_ptr<ProcessPool>> Create(const ProcessOptions& options,
                                                             int64_t max_observation_bytes);
  ~ProcessPool();  // sends close to idle processes, kills what does not exit

  struct Lease {
    int slot = -1;
    std::unique_ptr<Subprocess> process;
  };
  // An idle process, (re)started if needed; waits for one until `deadline`.
  absl::StatusOr<Lease> Acquire(absl::Time deadline);
  // Returns a lease. `healthy` = false kills the process; its slot restarts on next Acquire.
  void Release(Lease lease, bool healthy);

  // One warn line per kind of incident the first time, then every 100th (counted always).
  void Incident(std::string_view kind, const std::string& message);

  const ProcessOptions& options() const { return options_; }
  int64_t max_observation_bytes() const { return max_observation_bytes_; }
  const std::string& name() const { return hello_.name; }
  const VocabularySpec& vocabulary() const { return hello_.vocabulary; }
  std::string command() const;

 private:
  ProcessPool(const ProcessOptions& options, int64_t max_observation_bytes);
  absl::StatusOr<std::unique_ptr<Subprocess>> StartOne(protocol::Hello* hello);

  const ProcessOptions options_;
  const int64_t max_observation_bytes_;
  protocol::Hello hello_;  // from the first process; fixed afterwards
  Counter* const restarts_;

  absl::Mutex mu_;
  // Processes not leased; a null entry is a slot whose process must be (re)started.
  std::vector<Lease> idle_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> incidents_ ABSL_GUARDED_BY(mu_);
};

// One episode slot over a ProcessPool. Not thread-safe (one episode at a time).
class ProcessEnv : public Environment {
 public:
  explicit ProcessEnv(std::shared_ptr<ProcessPool> pool);
  ~ProcessEnv() override;

  absl::StatusOr<StepResult> Reset(const TaskInstance& task) override;
  absl::StatusOr<StepResult> Step(std::string_view action) override;
  absl::StatusOr<double> ScorePartial() override;
  void Close() override;
  const VocabularySpec& vocabulary() const override { return pool_->vocabulary(); }
  std::string DebugString() const override;

 private:
  // Sends `request` and reads the observation reply, turning every failure into an ended
  // episode (and a restarted process where its state is unknown).
  StepResult Exchange(const std::string& request, std::string_view what);
  StepResult EndEpisode(EpisodeEnd end, std::string_view kind, std::string message, bool healthy,
                        std::optional<double> partial = std::nullopt);
  std::optional<double> ScoreAfterTimeout();
  std::string Context(std::string_view what) const;
  void Truncate(StepResult& r);

  std::shared_ptr<ProcessPool> pool_;
  ProcessPool::Lease lease_;
  bool in_episode_ = false;
  std::optional<double> last_partial_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_PROCESS_PROCESS_ENV_H_
