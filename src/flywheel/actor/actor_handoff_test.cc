// Handing in-flight episodes from one actor to another at their last environment boundary
// (Actor::Suspend / Adopt / Drain, suspended_episode.h): two actors over one executor play the
// multi-turn guess task and swap the rollout role many times; no episode may be lost, repeated
// or mangled on the way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "flywheel/actor/actor.h"
#include "flywheel/actor/env_tokenizer.h"
#include "flywheel/core/strings.h"
#include "flywheel/core/wait_for.h"
#include "flywheel/model/weight_snapshot.h"

namespace flywheel {
namespace {

// Long enough turns, next to short environment calls, that a switch often finds a policy turn
// half generated.
constexpr int64_t kMaxNewTokens = 8;

// Two actors ("actor-a", "actor-b") with their own engines over one environment executor and
// task source, and one sink that counts every trajectory id it is given.
struct TwoActors {
  explicit TwoActors(double latency_ms) {
    EnvOptions env_options;
    env_options.latency.model = LatencyKind::kConstant;
    env_options.latency.mean_ms = latency_ms;
    factory = *EnvFactory::Create(env_options);
    executor = std::make_unique<EnvExecutor>(EnvExecutor::Options{.num_workers = 1});
    tokenizer = *MakeTokenizer(factory->vocabulary());
    ModelOptions model_options;
    model_options.vocab_size = tokenizer->vocab_size();
    model_options.hidden_size = 32;
    model_options.num_layers = 1;
    model_options.num_heads = 2;
    model_options.num_kv_heads = 1;
    model_options.intermediate_size = 64;
    model = *MakeTransformer(model_options);
    tasks = std::make_unique<TaskSource>(factory->task_name(), 7, 4);
    ActorOptions options;
    options.episodes_in_flight = 6;
    options.max_new_tokens = kMaxNewTokens;
    options.max_turns = 4;
    for (const char* name : {"actor-a", "actor-b"}) {
      actors.push_back(std::make_unique<Actor>(
          name, options, SamplingParams{}, *RolloutEngine::Create({}, *MakeSnapshot(model, 0)),
          factory.get(), executor.get(), tokenizer.get(), tasks.get(),
          [this](Trajectory t) {
            absl::MutexLock lock(&mu);
            ++inserted[t.id];
            trajectories.push_back(std::move(t));
            return absl::OkStatus();
          },
          11 + actors.size()));
    }
  }
  ~TwoActors() {
    executor->Close();
    actors.clear();
  }

  // Every id an actor started (actor_id/0 .. /started-1), in order.
  std::set<std::string> StartedIds() const {
    std::set<std::string> ids;
    const char* names[] = {"actor-a", "actor-b"};
    for (size_t a = 0; a < actors.size(); ++a) {
      const int64_t started = actors[a]->stats().episodes_started;
      for (int64_t i = 0; i < started; ++i) ids.insert(StrCat(names[a], "/", i));
    }
    return ids;
  }
  // Fails unless every started episode reached the sink exactly once, and nothing else did.
  void ExpectEachStartedEpisodeInsertedOnce() {
    const std::set<std::string> started = StartedIds();
    absl::MutexLock lock(&mu);
    EXPECT_EQ(inserted.size(), started.size());
    for (const std::string& id : started) {
      auto it = inserted.find(id);
      if (it == inserted.end()) {
        ADD_FAILURE() << "episode " << id << " was started and never inserted (lost)";
      } else {
        EXPECT_EQ(it->second, 1) << "episode " << id << " inserted " << it->second << " times";
      }
    }
    for (const auto& [id, n] : inserted) {
      EXPECT_TRUE(started.count(id)) << "inserted " << id << ", which no actor started";
    }
  }
  size_t num_inserted() {
    absl::MutexLock lock(&mu);
    return trajectories.size();
  }

  std::unique_ptr<EnvFactory> factory;
  std::unique_ptr<EnvExecutor> executor;
  std::unique_ptr<Tokenizer> tokenizer;
  Transformer model{nullptr};
  std::unique_ptr<TaskSource> tasks;
  std::vector<std::unique_ptr<Actor>> actors;
  absl::Mutex mu;
  std::map<std::string, int> inserted ABSL_GUARDED_BY(mu);
  std::vector<Trajectory> trajectories ABSL_GUARDED_BY(mu);
};

// One actor's open-ended Run on a thread of its own.
class Running {
 public:
  // Returns once the Run has begun, so that a Suspend right after it finds the Run to end.
  explicit Running(Actor* actor)
      : actor_(actor), thread_([this, actor] { status_ = actor->Run(); }) {
    EXPECT_TRUE(WaitFor([actor] { return actor->running(); }));
  }
  ~Running() {  // after a failed assertion: the Run is open-ended
    if (thread_.joinable()) {
      actor_->Stop();
      thread_.join();
    }
  }
  absl::Status Join() {
    thread_.join();
    return status_;
  }

 private:
  Actor* actor_;
  absl::Status status_;
  std::thread thread_;
};

// Every turn is [observation tokens][1..max_new_tokens generated tokens], and all the generated
// tokens of one turn come from one version: a turn abandoned by Suspend left nothing behind, and
// its regeneration on the adopter is whole. Versions never go back (each switch publishes a newer
// one to the adopter).
void ExpectWellFormedTurns(const Trajectory& t) {
  ASSERT_FALSE(t.turn_ends.empty()) << t.DebugString();
  EXPECT_EQ(t.turn_ends.back(), t.size()) << t.id << ": ended after an action";
  int64_t start = 0, last_version = 0;
  for (size_t turn = 0; turn < t.turn_ends.size(); ++turn) {
    const int64_t end = t.turn_ends[turn];
    int64_t first_generated = start;
    while (first_generated < end && !t.trainable[first_generated]) ++first_generated;
    EXPECT_GT(first_generated, start) << t.id << " turn " << turn << ": no observation";
    const int64_t generated = end - first_generated;
    EXPECT_GE(generated, 1) << t.id << " turn " << turn;
    EXPECT_LE(generated, kMaxNewTokens) << t.id << " turn " << turn << ": tokens of two turns";
    for (int64_t i = first_generated; i < end; ++i) {
      EXPECT_TRUE(t.trainable[i]) << t.id << " token " << i << ": observation inside an action";
      EXPECT_EQ(t.versions[i], t.versions[first_generated])
          << t.id << " turn " << turn << " mixes versions";
    }
    if (first_generated < end) {
      EXPECT_GE(t.versions[first_generated], last_version) << t.id << " turn " << turn;
      last_version = t.versions[first_generated];
    }
    start = end;
  }
}

TEST(ActorHandoffTest, EpisodesMoveBetweenActorsWithoutLossOrDuplication) {
  TwoActors h(0.5);
  // At least this many switches, and then more until one has caught a policy turn generating
  // (most find every episode waiting on its environment: decoding this model is fast).
  const int kSwitches = 24, kMaxSwitches = 200;
  Actor* from = h.actors[0].get();
  Actor* to = h.actors[1].get();
  std::vector<double> suspend_ms;
  int64_t handed_over = 0, discarded = 0, finished_in_place = 0;
  auto running = std::make_unique<Running>(from);
  int i = 0;
  for (; i < kSwitches || (discarded == 0 && i < kMaxSwitches); ++i) {
    // Let the actor play a little, so that its episodes are at every stage: resetting,
    // generating, waiting for a step.
    absl::SleepFor(absl::Milliseconds(5 + 3 * (i % 3)));
    absl::StatusOr<ActorSwitch> suspended = from->Suspend();
    const absl::Status run = running->Join();
    ASSERT_TRUE(suspended.ok()) << suspended.status();
    ASSERT_TRUE(run.ok()) << run;
    EXPECT_EQ(from->in_flight(), 0) << "switch " << i;
    suspend_ms.push_back(absl::ToDoubleMilliseconds(suspended->elapsed));
    handed_over += static_cast<int64_t>(suspended->episodes.size());
    discarded += suspended->tokens_discarded;
    finished_in_place += suspended->finished_in_place;
    for (const SuspendedEpisode& s : suspended->episodes) {
      EXPECT_TRUE(s.Validate(h.tokenizer->vocab_size()).ok()) << s.DebugString();
      EXPECT_EQ(s.turns, static_cast<int64_t>(s.trajectory.turn_ends.size())) << s.DebugString();
      // At the boundary the trajectory ends with the action the environment answered.
      if (!s.trajectory.turn_ends.empty()) {
        EXPECT_EQ(s.trajectory.turn_ends.back(), s.trajectory.size()) << s.DebugString();
      }
    }
    // The adopter's tokens carry a version of their own, newer at every switch.
    to->PublishSnapshot(*MakeSnapshot(h.model, i + 1));
    if (i % 2 == 0) {
      ASSERT_TRUE(to->Adopt(std::move(suspended->episodes)).ok());  // before Run
      running = std::make_unique<Running>(to);
    } else {
      running = std::make_unique<Running>(to);
      ASSERT_TRUE(to->Adopt(std::move(suspended->episodes)).ok());  // during Run
    }
    std::swap(from, to);
  }
  absl::StatusOr<ActorSwitch> drained = from->Drain();
  ASSERT_TRUE(drained.ok()) << drained.status();
  ASSERT_TRUE(running->Join().ok());
  EXPECT_TRUE(drained->episodes.empty());
  EXPECT_EQ(from->in_flight(), 0);
  EXPECT_EQ(to->in_flight(), 0);

  h.ExpectEachStartedEpisodeInsertedOnce();
  const ActorStats a = h.actors[0]->stats(), b = h.actors[1]->stats();
  EXPECT_EQ(a.episodes_suspended + b.episodes_suspended, handed_over);
  EXPECT_EQ(a.episodes_adopted + b.episodes_adopted, handed_over);
  EXPECT_EQ(a.tokens_discarded + b.tokens_discarded, discarded);
  // The test means something only if both kinds of boundary happened.
  EXPECT_GE(i, kSwitches);
  EXPECT_GT(handed_over, i) << "few episodes were in flight at the switches";
  EXPECT_GT(discarded, 0) << "no switch caught a policy turn generating";
  // The environment moved with its state: a fresh one would refuse a step before its reset.
  EXPECT_EQ(a.episodes_failed + b.episodes_failed, 0);

  int resumed = 0;
  absl::MutexLock lock(&h.mu);
  for (const Trajectory& t : h.trajectories) {
    EXPECT_TRUE(t.Validate(h.tokenizer->vocab_size()).ok()) << t.Validate();
    EXPECT_EQ(t.tokens[0], h.tokenizer->special().bos) << t.id;
    EXPECT_TRUE(t.termination == Termination::kDone || t.termination == Termination::kMaxTurns)
        << t.DebugString();
    ExpectWellFormedTurns(t);
    if (t.MinVersion() != t.MaxVersion()) ++resumed;
  }
  EXPECT_GT(resumed, 0) << "no trajectory was played on two actors";

  const double mean = std::accumulate(suspend_ms.begin(), suspend_ms.end(), 0.0) /
                      static_cast<double>(suspend_ms.size());
  const double most = *std::max_element(suspend_ms.begin(), suspend_ms.end());
  std::printf(
      "%d switches: %lld episodes handed over, %lld finished in place, %lld tokens discarded, "
      "%d trajectories resumed; Suspend took %.2f ms mean, %.2f ms max\n",
      i, static_cast<long long>(handed_over), static_cast<long long>(finished_in_place),
      static_cast<long long>(discarded), resumed, mean, most);
  std::printf("Suspend per switch (ms):");
  for (double ms : suspend_ms) std::printf(" %.2f", ms);
  std::printf("\n");
}

TEST(ActorHandoffTest, DrainFinishesInFlightEpisodesInPlace) {
  TwoActors h(4.0);
  Actor& actor = *h.actors[0];
  Running running(&actor);
  ASSERT_TRUE(
      WaitFor([&] { return actor.stats().episodes_finished >= 3 && actor.in_flight() > 0; }));
  absl::StatusOr<ActorSwitch> drained = actor.Drain();
  ASSERT_TRUE(drained.ok()) << drained.status();
  ASSERT_TRUE(running.Join().ok());
  EXPECT_TRUE(drained->episodes.empty());
  EXPECT_GE(drained->finished_in_place, 1);
  EXPECT_EQ(drained->tokens_discarded, 0);
  EXPECT_EQ(actor.in_flight(), 0);
  h.ExpectEachStartedEpisodeInsertedOnce();
  // Nothing runs on after a Drain: no new episode starts.
  const size_t inserted = h.num_inserted();
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(h.num_inserted(), inserted);
  EXPECT_EQ(actor.in_flight(), 0);
}

TEST(ActorHandoffTest, WithoutARunTheCallerDrivesTheEpisodes) {
  TwoActors h(4.0);
  Actor& a = *h.actors[0];
  Actor& b = *h.actors[1];
  Running running(&a);
  ASSERT_TRUE(WaitFor([&] { return a.stats().tokens_generated >= 10 && a.in_flight() > 0; }));
  absl::StatusOr<ActorSwitch> suspended = a.Suspend();
  ASSERT_TRUE(suspended.ok()) << suspended.status();
  ASSERT_TRUE(running.Join().ok());
  const int64_t n = static_cast<int64_t>(suspended->episodes.size());
  ASSERT_GT(n, 0);
  ASSERT_TRUE(b.Adopt(std::move(suspended->episodes)).ok());
  EXPECT_EQ(b.in_flight(), n);  // adopted, not started yet
  // b has never run: Drain plays the adopted episodes to their end on this thread.
  absl::StatusOr<ActorSwitch> drained = b.Drain();
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_EQ(drained->finished_in_place, n);
  EXPECT_EQ(b.in_flight(), 0);
  EXPECT_EQ(b.stats().episodes_started, 0);
  h.ExpectEachStartedEpisodeInsertedOnce();
}

TEST(ActorHandoffTest, SuspendingAnIdleActorReturnsNothing) {
  TwoActors h(1.0);
  Actor& actor = *h.actors[0];
  absl::StatusOr<ActorSwitch> never_run = actor.Suspend();
  ASSERT_TRUE(never_run.ok()) << never_run.status();
  EXPECT_TRUE(never_run->episodes.empty());
  EXPECT_EQ(never_run->finished_in_place, 0);

  // A Run that admission keeps idle returns once suspended, having started nothing.
  actor.SetAdmission([] { return int64_t{0}; });
  Running running(&actor);
  absl::SleepFor(absl::Milliseconds(30));
  absl::StatusOr<ActorSwitch> idle = actor.Suspend();
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_TRUE(running.Join().ok());
  EXPECT_TRUE(idle->episodes.empty());
  EXPECT_EQ(actor.stats().episodes_started, 0);
}

TEST(ActorHandoffTest, AdoptingAnEpisodeWithoutItsEnvironmentIsAnError) {
  TwoActors h(1.0);
  std::vector<SuspendedEpisode> episodes(2);
  episodes[0].trajectory.id = "actor-x/0";
  episodes[0].env = h.factory->NewEnvironment();
  episodes[0].observation = "go";
  episodes[1].trajectory.id = "actor-x/1";  // its env went missing
  episodes[1].observation = "go";
  const absl::Status s = h.actors[1]->Adopt(std::move(episodes));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("actor-x/1"), std::string::npos) << s;
  EXPECT_EQ(h.actors[1]->in_flight(), 0) << "all or none: the valid one is not adopted either";
}

}  // namespace
}  // namespace flywheel
