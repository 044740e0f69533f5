#include "flywheel/env/env_executor.h"

#include <memory>

#include "flywheel/observe/trace_recorder.h"

namespace flywheel {
namespace {

// Idle threads re-check for shutdown at this interval even without a signal.
constexpr absl::Duration kIdlePoll = absl::Milliseconds(200);
// Close() repeats its interrupt at this interval while a worker is still in a call.
constexpr absl::Duration kInterruptAgain = absl::Milliseconds(100);

}  // namespace

EnvExecutor::EnvExecutor(Options options) : clock_(options.clock) {
  for (int i = 0; i < std::max(1, options.num_workers); ++i) {
    threads_.emplace_back([this] { WorkerLoop(); });
  }
  threads_.emplace_back([this] { TimerLoop(); });
}

EnvExecutor::~EnvExecutor() { Close(); }

void EnvExecutor::Close() {
  Close([] {});
}

void EnvExecutor::Close(absl::FunctionRef<void()> interrupt_running) {
  std::vector<Environment*> awaiting;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    awaiting.assign(awaiting_.begin(), awaiting_.end());
  }
  // Their callbacks now defer to `cancelled_`, so no environment is released (and freed by its
  // owner) while this loop may still call it.
  for (Environment* env : awaiting) env->CancelAwait();
  // No call starts from here on: those running are all there is to end. But a worker that took
  // its call just before `closed_` was set may not be waiting on it yet, and an interrupt ends
  // only the waits under way (under load a reset began just after it and waited out its whole
  // 60 s timeout): interrupt again until no worker is busy.
  interrupt_running();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(
                                   +[](int64_t* busy) { return *busy == 0; }, &busy_workers_),
                               kInterruptAgain)) {
        break;
      }
    }
    interrupt_running();
  }
  std::vector<absl::AnyInvocable<void()>> cancelled;
  std::deque<Work> work;
  std::vector<Timer> timers;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](absl::flat_hash_set<Environment*>* s) { return s->empty(); }, &awaiting_));
    cancelled.swap(cancelled_);
    work.swap(work_);
    while (!timers_.empty()) {
      timers.push_back(std::move(const_cast<Timer&>(timers_.top())));
      timers_.pop();
    }
    work_cv_.SignalAll();
    timer_cv_.SignalAll();
  }
  for (auto& c : cancelled) c();
  for (auto& w : work) w.cancel();
  for (auto& t : timers) t.fire(absl::CancelledError("environment executor closed"));
  for (auto& t : threads_) t.join();
  threads_.clear();
}

int64_t EnvExecutor::in_flight() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(awaiting_.size() + work_.size() + timers_.size()) + busy_workers_;
}

void EnvExecutor::Submit(absl::AnyInvocable<void()> run, absl::AnyInvocable<void()> cancel) {
  {
    absl::MutexLock lock(&mu_);
    if (!closed_) {
      work_.push_back({std::move(run), nullptr});
      work_.back().cancel = std::move(cancel);
      work_cv_.Signal();
      return;
    }
  }
  cancel();
}

void EnvExecutor::StartReset(Environment* env, TaskInstance task, StepCallback done) {
  auto shared = std::make_shared<StepCallback>(std::move(done));
  auto cancel = [shared] { (*shared)(absl::CancelledError("environment executor closed")); };
  bool closed;
  {
    absl::MutexLock lock(&mu_);
    closed = closed_;
    if (!closed) awaiting_.insert(env);
  }
  if (closed) {
    cancel();
    return;
  }
  // The reset waits for the environment's resources (a process copy) without a worker thread.
  env->AwaitResources(
      [this, env, task = std::move(task), shared, cancel](absl::Status status) mutable {
        {
          absl::MutexLock lock(&mu_);
          awaiting_.erase(env);
          if (closed_) {
            cancelled_.push_back(std::move(cancel));  // Close() delivers it
            return;
          }
        }
        if (!status.ok()) {
          (*shared)(std::move(status));
          return;
        }
        Submit(
            [this, env, task = std::move(task), shared] {
              TraceSpan span("env", "env reset");
              CompleteStep(env->Reset(task), std::move(*shared));
            },
               std::move(cancel));
      });
}

void EnvExecutor::StartStep(Environment* env, std::string action, StepCallback done) {
  auto shared = std::make_shared<StepCallback>(std::move(done));
  Submit(
      [this, env, action = std::move(action), shared] {
        TraceSpan span("env", "env step");
        CompleteStep(env->Step(action), std::move(*shared));
      },
         [shared] { (*shared)(absl::CancelledError("environment executor closed")); });
}

void EnvExecutor::StartScorePartial(Environment* env, ScoreCallback done) {
  auto shared = std::make_shared<ScoreCallback>(std::move(done));
  Submit(
      [env, shared] {
        TraceSpan span("env", "env score");
        (*shared)(env->ScorePartial());
      },
         [shared] { (*shared)(absl::CancelledError("environment executor closed")); });
}

std::future<absl::StatusOr<StepResult>> EnvExecutor::Reset(Environment* env, TaskInstance task) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<StepResult>>>();
  auto future = promise->get_future();
  StartReset(env, std::move(task),
             [promise](absl::StatusOr<StepResult> r) { promise->set_value(std::move(r)); });
  return future;
}

std::future<absl::StatusOr<StepResult>> EnvExecutor::Step(Environment* env, std::string action) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<StepResult>>>();
  auto future = promise->get_future();
  StartStep(env, std::move(action),
            [promise](absl::StatusOr<StepResult> r) { promise->set_value(std::move(r)); });
  return future;
}

// Runs on a worker: completes at once, or parks the result in the timer queue for its latency.
void EnvExecutor::CompleteStep(absl::StatusOr<StepResult> result, StepCallback done) {
  if (!result.ok() || result->latency <= absl::ZeroDuration()) {
    done(std::move(result));
    return;
  }
  const absl::Time due = clock_->Now() + result->latency;
  auto shared_result = std::make_shared<absl::StatusOr<StepResult>>(std::move(result));
  auto fire = [shared_result, done = std::move(done)](absl::Status status) mutable {
    if (!status.ok()) {
      done(std::move(status));
    } else {
      done(std::move(*shared_result));
    }
  };
  {
    absl::MutexLock lock(&mu_);
    if (!closed_) {
      timers_.push(Timer{due, next_seq_++, std::move(fire)});
      timer_cv_.Signal();
      return;
    }
  }
  fire(absl::CancelledError("environment executor closed"));
}

void EnvExecutor::HoldVirtualTime(absl::FunctionRef<void()> start) {
  {
    absl::MutexLock lock(&mu_);
    ++holds_;
  }
  start();
  absl::MutexLock lock(&mu_);
  --holds_;
  timer_cv_.Signal();
}

void EnvExecutor::WorkerLoop() {
  while (true) {
    Work work;
    {
      absl::MutexLock lock(&mu_);
      while (!closed_ && work_.empty()) work_cv_.WaitWithTimeout(&mu_, kIdlePoll);
      if (closed_) return;
      work = std::move(work_.front());
      work_.pop_front();
      ++busy_workers_;
    }
    work.run();
    absl::MutexLock lock(&mu_);
    --busy_workers_;
    if (busy_workers_ == 0 && work_.empty()) timer_cv_.Signal();  // virtual time may advance
  }
}

void EnvExecutor::TimerLoop() {
  while (true) {
    absl::AnyInvocable<void(absl::Status)> fire;
    {
      absl::MutexLock lock(&mu_);
      while (true) {
        if (closed_) return;
        if (timers_.empty()) {
          timer_cv_.WaitWithTimeout(&mu_, kIdlePoll);
          continue;
        }
        const absl::Time due = timers_.top().due;
        const absl::Time now = clock_->Now();
        if (due <= now) break;
        if (!IsVirtual()) {
          // Wakes early when a nearer timer is added or on close.
          timer_cv_.WaitWithDeadline(&mu_, std::min(due, now + kIdlePoll));
        } else if (busy_workers_ == 0 && work_.empty() && holds_ == 0) {
          clock_->SleepFor(due - now);  // nothing can schedule an earlier event: jump ahead
        } else {
          timer_cv_.WaitWithTimeout(&mu_, kIdlePoll);
        }
      }
      fire = std::move(const_cast<Timer&>(timers_.top()).fire);
      timers_.pop();
    }
    fire(absl::OkStatus());
  }
}

}  // namespace flywheel
