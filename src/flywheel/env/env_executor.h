// Runs environment calls for many concurrent episodes without a thread per episode.
//
//   StartStep(env, action, done) ─▶ work queue ─▶ worker (env->Step: compute only)
//                                                   │ result.latency > 0
//                                                   ▼
//                                  timer queue (one thread) ── at now + latency ──▶ done(result)
//
// Hundreds of episodes may be in flight; those waiting on latency sit in the timer queue, and a
// reset that needs a shared resource first (Environment::AwaitResources: a process copy) waits for
// it without a worker. A few workers run the compute (built-in tasks are microseconds; a process
// environment holds a worker while its process answers). On a VirtualClock the timer thread
// advances the clock to the next due time whenever no compute is pending, so the run is a
// discrete-event simulation.
//
// Calls for one Environment must not overlap (start the next after `done` ran); different
// environments may be driven concurrently. `done` runs on an executor thread and must be short;
// it may start the episode's next call but must not call Close().
// Close() cancels what has not run: its callbacks get CANCELLED.
#ifndef FLYWHEEL_ENV_ENV_EXECUTOR_H_
#define FLYWHEEL_ENV_ENV_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <future>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/core/clock.h"
#include "flywheel/env/env_options.h"
#include "flywheel/env/interface.h"

namespace flywheel {

class EnvExecutor {
 public:
  struct Options {
    int num_workers = 2;
    Clock* clock = RealClock();  // a VirtualClock makes latency virtual
  };
  using StepCallback = absl::AnyInvocable<void(absl::StatusOr<StepResult>)>;
  using ScoreCallback = absl::AnyInvocable<void(absl::StatusOr<double>)>;

  // num_workers from env.workers.
  static Options OptionsFor(const EnvOptions& env, Clock* clock = RealClock()) {
    return Options{static_cast<int>(env.workers), clock};
  }

  explicit EnvExecutor(Options options);
  ~EnvExecutor();  // Close()

  void StartReset(Environment* env, TaskInstance task, StepCallback done);
  void StartStep(Environment* env, std::string action, StepCallback done);
  void StartScorePartial(Environment* env, ScoreCallback done);

  // Future-returning forms, for callers that prefer to block (with a deadline) on one episode.
  std::future<absl::StatusOr<StepResult>> Reset(Environment* env, TaskInstance task);
  std::future<absl::StatusOr<StepResult>> Step(Environment* env, std::string action);

  // Runs `start` (which starts calls from outside the executor's threads) with virtual time
  // held still, so that a batch of episodes started together also starts at one virtual
  // instant. Calls started from callbacks need no hold. A no-op on the real clock.
  void HoldVirtualTime(absl::FunctionRef<void()> start);

  // Stops the threads; pending calls complete with CANCELLED. Idempotent. Calls running on a worker
  // are waited for: `interrupt_running`, run once no new call can start and again every 100 ms
  // while a worker is still in a call, can end them sooner (EnvFactory::Interrupt, for
  // environment processes that may hang).
  void Close();
  void Close(absl::FunctionRef<void()> interrupt_running);

  // Calls started whose callback has not run: waiting for resources, queued, computing, or waiting
  // out their latency.
  int64_t in_flight() const;

 private:
  struct Timer {
    absl::Time due;
    int64_t seq;                                  // FIFO among equal due times
    absl::AnyInvocable<void(absl::Status)> fire;  // OK, or CANCELLED on close
    bool operator>(const Timer& o) const { return due != o.due ? due > o.due : seq > o.seq; }
  };

  void Submit(absl::AnyInvocable<void()> work, absl::AnyInvocable<void()> cancel);
  void CompleteStep(absl::StatusOr<StepResult> result, StepCallback done);
  void WorkerLoop();
  void TimerLoop();
  bool IsVirtual() const { return clock_ != RealClock(); }

  Clock* const clock_;
  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;   // work queued or closing
  absl::CondVar timer_cv_;  // timer added, worker idle, or closing
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  struct Work {
    absl::AnyInvocable<void()> run;
    absl::AnyInvocable<void()> cancel;
  };
  std::deque<Work> work_ ABSL_GUARDED_BY(mu_);
  int64_t busy_workers_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t holds_ ABSL_GUARDED_BY(mu_) = 0;  // HoldVirtualTime calls in progress
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_ ABSL_GUARDED_BY(mu_);
  // Environments whose reset waits in AwaitResources, and the callbacks of those that came back
  // after Close() began (delivered by Close as CANCELLED).
  absl::flat_hash_set<Environment*> awaiting_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::AnyInvocable<void()>> cancelled_ ABSL_GUARDED_BY(mu_);
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_ENV_EXECUTOR_H_
