#include "flywheel/actor/actor.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/actor/actor_test_util.h"
#include "flywheel/core/wait_for.h"
#include "flywheel/model/weight_snapshot.h"

namespace flywheel {
namespace {

TEST(ActorTest, RunsConcurrentEpisodesIntoValidTrajectories) {
  ActorHarness h(2.0);
  ASSERT_TRUE(h.actor->Run(12).ok());
  const std::vector<Trajectory> out = h.Take();
  ASSERT_EQ(out.size(), 12u);
  std::map<std::string, int> per_group;
  for (const Trajectory& t : out) {
    EXPECT_TRUE(t.Validate(h.tokenizer->vocab_size()).ok()) << t.Validate();
    EXPECT_GT(t.NumTrainable(), 0);
    EXPECT_EQ(t.MinVersion(), 0);
    EXPECT_EQ(t.tokens[0], h.tokenizer->special().bos);
    EXPECT_FALSE(t.trainable[0]);
    EXPECT_TRUE(t.termination == Termination::kDone || t.termination == Termination::kMaxTurns)
        << t.DebugString();
    ASSERT_FALSE(t.turn_ends.empty());
    EXPECT_LE(t.turn_ends.size(), 4u);
    ++per_group[t.group_id];
  }
  // 12 episodes = 3 task instances × G = 4 rollouts
  ASSERT_EQ(per_group.size(), 3u);
  for (const auto& [group, n] : per_group) EXPECT_EQ(n, 4) << group;
  const ActorStats stats = h.actor->stats();
  EXPECT_EQ(stats.episodes_finished, 12);
  EXPECT_GT(stats.tokens_generated, 12);
  EXPECT_GT(stats.env_wait_seconds, 0);
}

TEST(ActorTest, NewWeightsTagTheTokensTheyProduce) {
  ActorHarness h(1.0);
  ASSERT_TRUE(h.actor->Run(4).ok());
  for (const Trajectory& t : h.Take()) EXPECT_EQ(t.MaxVersion(), 0);
  h.actor->PublishSnapshot(*MakeSnapshot(h.model, 5));
  ASSERT_TRUE(h.actor->Run(4).ok());
  const std::vector<Trajectory> after = h.Take();
  ASSERT_EQ(after.size(), 4u);
  for (const Trajectory& t : after) {
    EXPECT_EQ(t.MinVersion(), 5);
    EXPECT_EQ(t.MaxVersion(), 5);
  }
  EXPECT_EQ(h.actor->version(), 5);
}

TEST(ActorTest, ExpiredBudgetEndsTheEpisodeWithItsPartialScore) {
  ActorOptions options;
  options.episode_time_budget_s = 0.15;
  ActorHarness h(100.0, options);  // the reset fits in the budget, reset + one step do not
  ASSERT_TRUE(h.actor->Run(4).ok());
  const std::vector<Trajectory> out = h.Take();
  ASSERT_EQ(out.size(), 4u);
  for (const Trajectory& t : out) {
    if (t.termination != Termination::kTimeout) {
      EXPECT_EQ(t.termination, Termination::kDone);  // solved on the first guess
      continue;
    }
    ASSERT_TRUE(t.partial_score.has_value());
    EXPECT_FLOAT_EQ(t.final_reward, *t.partial_score);
  }
  EXPECT_GE(h.actor->stats().episodes_timed_out, 3);
}

TEST(ActorTest, AFullContextEndsTheEpisodeNotTheActor) {
  // 16 tokens hold the opening and a turn or two of guess, not the 4 turns allowed.
  ActorHarness h(1.0, {}, /*max_seq_len=*/16);
  const absl::Status run = h.actor->Run(8);
  ASSERT_TRUE(run.ok()) << run;
  const std::vector<Trajectory> out = h.Take();
  ASSERT_EQ(out.size(), 8u);
  int cut_short = 0;
  for (const Trajectory& t : out) {
    EXPECT_LE(t.size(), 16u) << t.DebugString();
    if (t.termination == Termination::kMaxTurns && t.turn_ends.size() < 4) ++cut_short;
  }
  EXPECT_GT(cut_short, 0);
}

TEST(ActorTest, AdmissionStartsWholeGroupsOnlyWhenThereIsRoom) {
  ActorHarness h(2.0);  // G = 4, episodes_in_flight = 6
  // The job's rule in miniature: a pipeline of one group, counting episodes being played and
  // trajectories handed over but not yet taken ("trained on").
  std::atomic<int64_t> cap{0};
  std::atomic<int64_t> most_in_flight{0};
  std::atomic<int64_t> asked{0};
  h.actor->SetAdmission([&] {
    ++asked;
    const int64_t in_flight = h.actor->in_flight();
    most_in_flight = std::max<int64_t>(most_in_flight, in_flight);
    absl::MutexLock lock(&h.mu);
    return cap.load() - in_flight - static_cast<int64_t>(h.trajectories.size());
  });
  absl::Status run;
  std::thread actor([&] { run = h.actor->Run(12); });
  // The actor has asked for room and been refused, and again when woken.
  ASSERT_TRUE(WaitFor([&] {
    h.actor->Wake();
    return asked >= 2;
  }));
  EXPECT_EQ(h.actor->in_flight(), 0);  // no room: nothing started
  EXPECT_TRUE(h.Take().empty());
  cap = 4;
  h.actor->Wake();
  std::map<std::string, int> per_group;
  int taken = 0;
  const bool all_taken = WaitFor([&] {
    for (const Trajectory& t : h.Take()) {
      ++per_group[t.group_id];
      ++taken;
    }
    h.actor->Wake();
    return taken >= 12;
  });
  if (!all_taken) h.actor->Stop();
  actor.join();
  ASSERT_TRUE(all_taken) << "took " << taken << " of 12 trajectories";
  ASSERT_TRUE(run.ok()) << run;
  EXPECT_LE(most_in_flight.load(), 4);  // never more than the room, though 6 are allowed
  ASSERT_EQ(per_group.size(), 3u);
  for (const auto& [group, n] : per_group) EXPECT_EQ(n, 4) << group;
}

TEST(ActorTest, StopEndsAnOpenEndedRun) {
  ActorHarness h(5.0);
  absl::Status status;
  std::thread runner([&] { status = h.actor->Run(); });
  EXPECT_TRUE(WaitFor([&] { return h.actor->stats().episodes_finished > 0; }));
  h.actor->Stop();
  runner.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_GT(h.actor->stats().episodes_finished, 0);
}

TEST(ActorTest, SinkErrorStopsTheActor) {
  ActorHarness h(1.0);
  h.actor = nullptr;
  ActorOptions options;
  options.episodes_in_flight = 2;
  h.actor = std::make_unique<Actor>(
      "actor-1", options, SamplingParams{}, *RolloutEngine::Create({}, *MakeSnapshot(h.model, 0)),
      h.factory.get(), h.executor.get(), h.tokenizer.get(), h.tasks.get(),
      [](Trajectory) { return absl::CancelledError("buffer closed"); }, 3);
  const absl::Status s = h.actor->Run(10);
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
}

}  // namespace
}  // namespace flywheel
