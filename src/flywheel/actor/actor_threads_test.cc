#include "flywheel/actor/actor_threads.h"

#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "flywheel/actor/actor_test_util.h"
#include "flywheel/core/wait_for.h"

namespace flywheel {
namespace {

TEST(ActorThreadsTest, RunsEveryActorUntilStopped) {
  ActorHarness h(2.0);
  std::vector<std::unique_ptr<Actor>> actors;
  actors.push_back(std::move(h.actor));
  ActorThreads threads;
  threads.Start(actors);
  EXPECT_TRUE(WaitFor([&] { return actors[0]->stats().episodes_finished >= 8; }));
  threads.Stop();
  EXPECT_TRUE(threads.FirstError().ok()) << threads.FirstError();
  const int64_t finished = actors[0]->stats().episodes_finished;
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(actors[0]->stats().episodes_finished, finished) << "an actor ran on after Stop()";
  threads.Stop();  // idempotent
}

TEST(ActorThreadsTest, KeepsTheErrorAnActorStoppedWith) {
  ActorHarness h(1.0);
  std::vector<std::unique_ptr<Actor>> actors;
  actors.push_back(std::move(h.actor));  // a healthy one, then one whose sink fails
  ActorOptions options;
  options.episodes_in_flight = 2;
  actors.push_back(std::make_unique<Actor>(
      "actor-1", options, SamplingParams{}, *RolloutEngine::Create({}, *MakeSnapshot(h.model, 0)),
      h.factory.get(), h.executor.get(), h.tokenizer.get(), h.tasks.get(),
      [](Trajectory) { return absl::DataLossError("disk full"); }, 3));
  ActorThreads threads;
  threads.Start(actors);
  EXPECT_TRUE(WaitFor([&] { return !threads.FirstError().ok(); }));
  const absl::Status error = threads.FirstError();
  EXPECT_TRUE(absl::IsDataLoss(error)) << error;
  EXPECT_EQ(error.message(), "disk full");
  threads.Stop();
  EXPECT_TRUE(absl::IsDataLoss(threads.FirstError())) << "Stop() must not clear a real error";
}

}  // namespace
}  // namespace flywheel
