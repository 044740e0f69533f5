#include "flywheel/env/env_executor.h"

#include <gtest/gtest.h>

#include <memory>

#include "absl/time/clock.h"
#include "flywheel/env/latency/latency_env.h"
#include "flywheel/env/tasks/guess.h"
#include "flywheel/env/test_util.h"

namespace flywheel {
namespace {

// Drives one guess episode through the executor with callbacks only (as the actor will).
struct Episode {
  std::unique_ptr<Environment> env;
  std::unique_ptr<Policy> policy;
  double reward = 0;
  bool finished = false;
  absl::Status error;
};

class Driver {
 public:
  Driver(EnvExecutor& executor, int n, absl::Duration latency) : executor_(executor) {
    auto factory = LatencyModelFactory::Create(
        testing::Latency(LatencyKind::kConstant, absl::ToDoubleMilliseconds(latency)));
    for (int i = 0; i < n; ++i) {
      auto e = std::make_unique<Episode>();
      e->env = std::make_unique<LatencyEnv>(std::make_unique<GuessEnv>(GuessOptions{}), *factory,
                                            nullptr);
      e->policy = MakeGuessExpert(GuessOptions{});
      episodes_.push_back(std::move(e));
    }
  }

  void StartAll() {
    executor_.HoldVirtualTime([this] { StartEach(); });
  }

  void StartEach() {
    for (size_t i = 0; i < episodes_.size(); ++i) {
      Episode* e = episodes_[i].get();
      executor_.StartReset(e->env.get(), TaskInstance{"guess", i},
                           [this, e, i](absl::StatusOr<StepResult> r) {
                             if (!Check(e, r)) return;
                             e->policy->Begin(TaskInstance{"guess", i}, r->observation);
                             Next(e, r->observation);
                           });
    }
  }

  // Waits (with a deadline) until every episode finished.
  bool Wait(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return finished_ == static_cast<int>(episodes_.size());
    };
    return mu_.AwaitWithTimeout(absl::Condition(&all), timeout);
  }

  const std::vector<std::unique_ptr<Episode>>& episodes() const { return episodes_; }

 private:
  void Next(Episode* e, const std::string& observation) {
    executor_.StartStep(e->env.get(), e->policy->Act(observation),
                        [this, e](absl::StatusOr<StepResult> r) {
                          if (!Check(e, r)) return;
                          e->reward += r->reward;
                          if (r->done) {
                            Finish(e, absl::OkStatus());
                          } else {
                            Next(e, r->observation);
                          }
                        });
  }
  bool Check(Episode* e, const absl::StatusOr<StepResult>& r) {
    if (r.ok()) return true;
    Finish(e, r.status());
    return false;
  }
  void Finish(Episode* e, absl::Status status) {
    absl::MutexLock lock(&mu_);
    e->error = status;
    e->finished = true;
    ++finished_;
  }

  EnvExecutor& executor_;
  std::vector<std::unique_ptr<Episode>> episodes_;
  absl::Mutex mu_;
  int finished_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(EnvExecutorTest, HundredsOfEpisodesOverlapTheirLatencyOnAVirtualClock) {
  VirtualClock clock;
  EnvExecutor executor({.num_workers = 2, .clock = &clock});
  Driver driver(executor, 300, absl::Seconds(1));
  const absl::Time start = clock.Now();
  driver.StartAll();
  ASSERT_TRUE(driver.Wait(absl::Seconds(30)));
  for (const auto& e : driver.episodes()) {
    EXPECT_TRUE(e->error.ok()) << e->error;
    EXPECT_EQ(e->reward, 1.0);
  }
  // Reset plus at most 5 binary-search steps, 1 s each, all episodes waiting together: about
  // 6 s of virtual time, not 300 × 6 s.
  const absl::Duration elapsed = clock.Now() - start;
  EXPECT_GE(elapsed, absl::Seconds(2));
  EXPECT_LE(elapsed, absl::Seconds(6));
}

TEST(EnvExecutorTest, WaitingEpisodesHoldNoThreadOnTheRealClock) {
  EnvExecutor executor({.num_workers = 2});
  Driver driver(executor, 200, absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  driver.StartAll();
  ASSERT_TRUE(driver.Wait(absl::Seconds(60)));
  for (const auto& e : driver.episodes()) EXPECT_EQ(e->reward, 1.0);
  // Serially (or a thread per wait on 2 workers) this is 200 × 6 × 50 ms = 60 s; overlapped
  // it is about 0.3 s. The bound leaves room for a loaded machine.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(EnvExecutorTest, FuturesAndCloseCancelsPendingWaits) {
  EnvExecutor executor({.num_workers = 1});
  auto step = LatencyModelFactory::Create(testing::Latency(LatencyKind::kConstant, 3.6e6));
  LatencyEnv env(std::make_unique<GuessEnv>(GuessOptions{}), *step, nullptr);
  auto reset = executor.Reset(&env, TaskInstance{"guess", 1});
  // The reset itself waits an hour: still pending, and Close ends it with CANCELLED.
  EXPECT_EQ(reset.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  EXPECT_EQ(executor.in_flight(), 1);
  executor.Close();
  ASSERT_EQ(reset.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(reset.get().status().code(), absl::StatusCode::kCancelled);
  auto after = executor.Step(&env, "3");
  EXPECT_EQ(after.get().status().code(), absl::StatusCode::kCancelled);
}

// A guess environment whose reset needs a resource that the test hands out (as a process pool hands
// out copies).
class GatedEnv : public GuessEnv {
 public:
  GatedEnv() : GuessEnv(GuessOptions{}) {}
  void AwaitResources(absl::AnyInvocable<void(absl::Status)> ready) override {
    absl::MutexLock lock(&mu_);
    ready_ = std::move(ready);
  }
  void CancelAwait() override { Grant(absl::CancelledError("cancelled")); }
  bool waiting() {
    absl::MutexLock lock(&mu_);
    return ready_ != nullptr;
  }
  void Grant(absl::Status status = absl::OkStatus()) {
    absl::AnyInvocable<void(absl::Status)> ready;
    {
      absl::MutexLock lock(&mu_);
      ready.swap(ready_);
    }
    if (ready) ready(std::move(status));
  }

 private:
  absl::Mutex mu_;
  absl::AnyInvocable<void(absl::Status)> ready_ ABSL_GUARDED_BY(mu_);
};

TEST(EnvExecutorTest, AResetWaitingForItsResourceHoldsNoWorker) {
  EnvExecutor executor({.num_workers = 1});
  GatedEnv gated;
  auto waiting = executor.Reset(&gated, TaskInstance{"guess", 1});
  EXPECT_TRUE(gated.waiting());
  EXPECT_EQ(executor.in_flight(), 1);
  // The only worker is free: another episode plays while the first waits.
  GuessEnv other(GuessOptions{});
  auto reset = executor.Reset(&other, TaskInstance{"guess", 2});
  ASSERT_EQ(reset.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(reset.get().ok());
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  gated.Grant();
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(waiting.get().ok());
}

TEST(EnvExecutorTest, CloseCancelsResetsWaitingForTheirResource) {
  EnvExecutor executor({.num_workers = 1});
  GatedEnv gated;
  auto waiting = executor.Reset(&gated, TaskInstance{"guess", 1});
  executor.Close();
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(waiting.get().status().code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(gated.waiting());
  EXPECT_EQ(executor.in_flight(), 0);
}

TEST(EnvExecutorTest, ErrorsReachTheCallback) {
  EnvOptions options;
  options.workers = 1;
  EnvExecutor executor(EnvExecutor::OptionsFor(options));
  GuessEnv env(GuessOptions{});
  auto r = executor.Step(&env, "3").get();  // step before reset
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace flywheel
