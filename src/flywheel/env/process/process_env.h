// External environments: N copies of a user command speaking docs/env-protocol.md.
//
//   EnvFactory ── owns ──▶ ProcessPool: slots[0..copies) each holding one Subprocess (or none
//        │                  after a failure: restarted, with a handshake, at the next lease)
//        └─ NewEnvironment ─▶ ProcessEnv (one per episode slot)
//                               ├─ AwaitResources / Reset: lease a slot (in turn, when all busy)
//                               └─ Close / failure: return it (to the oldest waiter, if any)
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

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/core/metrics.h"
#include "flywheel/env/env_options.h"
#include "flywheel/env/interface.h"
#include "flywheel/env/process/protocol.h"
#include "flywheel/env/process/subprocess.h"

namespace flywheel {

// Thread-safe.
//
// Copies are leased in the order episodes ask for them. An episode driven by an EnvExecutor asks
// with AcquireAsync and holds no thread while it waits: the copy is handed over by the thread that
// releases it (so an actor can keep many more episodes in flight than there are copies).
class ProcessPool {
 public:
  // Starts every copy and checks its hello; fails (naming the command) if any cannot start, so
  // a wrong command is found before training begins.
  static absl::StatusOr<std::shared_ptr<ProcessPool>> Create(const ProcessOptions& options,
                                                             int64_t max_observation_bytes);
  ~ProcessPool();  // sends close to idle processes, kills what does not exit

  struct Lease {
    int slot = -1;                        // -1: no lease
    std::unique_ptr<Subprocess> process;  // null: the slot's process must be (re)started
  };
  using Grant = absl::AnyInvocable<void(absl::StatusOr<Lease>)>;

  // Hands a copy to `grant`: at once, on this thread, when one is idle; otherwise on the thread
  // that releases one, first come first served. Returns a ticket for CancelWait.
  int64_t AcquireAsync(Grant grant);
  // Withdraws a waiting request: its grant gets CANCELLED before this returns. False when it was no
  // longer waiting (granted already, or being granted on another thread).
  bool CancelWait(int64_t ticket);
  // A copy, waiting for one until `deadline` (for callers without an executor).
  absl::StatusOr<Lease> Acquire(absl::Time deadline);
  // Starts the lease's process (with its handshake) if it died or was killed.
  absl::Status EnsureRunning(Lease& lease);
  // Returns a lease, to the next waiter if any. `healthy` = false kills the process; its slot
  // restarts when leased next.
  void Release(Lease lease, bool healthy);

  // Ends every wait and every exchange in flight now: waiting requests get CANCELLED, reads give up
  // within kInterruptPoll (their episodes end, their processes are restarted when next leased).
  // Calls begun afterwards run normally. Stopping a job uses it so that no environment, however
  // stuck, holds the job past its stop bound.
  void Interrupt();
  // Reads the next reply of `p` until `deadline`, as Subprocess::ReadLine, and CANCELLED when
  // Interrupt() is called while it waits.
  absl::StatusOr<std::string> ReadReply(Subprocess& p, absl::Time deadline);
  static constexpr absl::Duration kInterruptPoll = absl::Milliseconds(100);

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
  std::atomic<int64_t> interrupts_{0};  // Interrupt() calls so far

  absl::Mutex mu_;
  // Processes not leased; a null entry is a slot whose process must be (re)started.
  std::vector<Lease> idle_ ABSL_GUARDED_BY(mu_);
  // Requests waiting for a copy, oldest first, by ticket.
  std::deque<std::pair<int64_t, Grant>> waiting_ ABSL_GUARDED_BY(mu_);
  int64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
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
  void AwaitResources(absl::AnyInvocable<void(absl::Status)> ready) override;
  void CancelAwait() override;
  const VocabularySpec& vocabulary() const override { return pool_->vocabulary(); }
  std::string DebugString() const override;

 private:
  // Sends `request` and reads the observation reply, turning every failure into an ended
  // episode (and a restarted process where its state is unknown).
  StepResult Exchange(const std::string& request, std::string_view what);
  StepResult EndEpisode(EpisodeEnd end, std::string_view kind, std::string message, bool healthy,
                        std::optional<double> partial = std::nullopt);
  std::optional<double> ScoreAfterTimeout();
  // Reset could not lease or start a process: an env-error episode, counted unless the wait was
  // cancelled (the job is stopping).
  StepResult StartFailure(const absl::Status& status);
  std::string Context(std::string_view what) const;
  void Truncate(StepResult& r);

  std::shared_ptr<ProcessPool> pool_;
  ProcessPool::Lease lease_;  // written by a grant only while no call is in progress
  // The pending AwaitResources, if any; held across AcquireAsync so that CancelAwait (from the
  // executor's closing thread) sees its ticket.
  absl::Mutex await_mu_;
  int64_t ticket_ ABSL_GUARDED_BY(await_mu_) = -1;
  bool in_episode_ = false;
  std::optional<double> last_partial_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_PROCESS_PROCESS_ENV_H_
