// An actor: many concurrent agent episodes on one rollout engine, on one thread.
//
//   Actor thread (Run)                         EnvExecutor threads
//   ──────────────────                         ───────────────────
//   start episodes up to episodes_in_flight ──StartReset──▶ env->Reset ─┐
//   loop:                                                               │ latency in the
//     drain env events ◀───────────────────── callbacks (queue) ◀───────┘ timer queue
//       reset/observation → engine.AppendTokens + StartTurn
//       done → trajectory → sink (blocks: buffer backpressure)
//     engine.Step(): one batched decode over every generating episode
//       turn ended → decode action text ──StartStep──▶ env->Step …
//     nothing to decode → wait for an env event (with a deadline)
//
// Episodes spend most of their time waiting on environments; while they wait, the engine
// decodes the others. Weights arrive through PublishSnapshot (any thread) and are taken between
// two decode steps; every token records the version that produced it.
#ifndef FLYWHEEL_ACTOR_ACTOR_H_
#define FLYWHEEL_ACTOR_ACTOR_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/actor/actor_options.h"
#include "flywheel/actor/rollout_engine.h"
#include "flywheel/core/trajectory.h"
#include "flywheel/env/env_executor.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/env/task_source.h"
#include "flywheel/model/tokenizer.h"

namespace flywheel {

// Where finished trajectories go (the buffer). May block (backpressure); an error stops the
// actor.
using TrajectorySink = std::function<absl::Status(Trajectory)>;

// How many more episodes the job lets actors start now (admission control); may be negative.
using AdmissionRoom = std::function<int64_t()>;

struct ActorStats {
  int64_t episodes_finished = 0;
  int64_t episodes_failed = 0;  // env-error, protocol error
  int64_t episodes_timed_out = 0;
  int64_t tokens_generated = 0;
  double generation_seconds = 0;   // in engine.Step
  double env_wait_seconds = 0;     // summed over episodes: reset/step/score calls in flight
  double insert_wait_seconds = 0;  // in the sink
};

class Actor {
 public:
  // Everything is borrowed and must outlive the actor, except the engine. The destructor waits
  // for the environment calls still in flight: close the executor first to cut that short.
  Actor(std::string actor_id, const ActorOptions& options, const SamplingParams& sampling,
        std::unique_ptr<RolloutEngine> engine, const EnvFactory* env_factory, EnvExecutor* executor,
        const Tokenizer* tokenizer, TaskSource* tasks, TrajectorySink sink, uint64_t seed);
  ~Actor();

  // Runs until `episodes` more episodes have been handed to the sink (negative: until Stop()).
  // Never starts more episodes than that, so a colocated step can generate exactly its batch.
  absl::Status Run(int64_t episodes = -1);
  // Makes Run return soon; in-flight episodes are cancelled (not handed to the sink).
  void Stop();
  // Before Run: start an episode only when `room` allows, and whole groups at a time (the
  // members of a group started are always started, so no group waits for admission half-done).
  // Without it only episodes_in_flight limits starts.
  void SetAdmission(AdmissionRoom room) { admission_ = std::move(room); }
  // Wakes a Run waiting for environment events, to look at its admission again (any thread).
  void Wake();
  // Episodes started and not yet ended (any thread).
  int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }

  void PublishSnapshot(std::shared_ptr<const WeightSnapshot> snapshot) {
    engine_->PublishSnapshot(std::move(snapshot));
  }
  int64_t version() const { return engine_->version(); }
  ActorStats stats() const;

 private:
  struct Episode;
  struct Event {
    int64_t episode;
    enum Kind { kReset, kStep, kScore } kind;
    absl::StatusOr<StepResult> result;  // kScore carries the score in partial_score
  };

  absl::Status StartEpisode();
  absl::Status HandleEvent(Event event);
  absl::Status HandleGenerated(const GeneratedToken& token);
  absl::Status StartPolicyTurn(Episode& ep, const std::string& observation);
  absl::Status Finish(Episode& ep, Termination termination, std::optional<double> partial);
  void BeginCall(Episode& ep);
  void Post(Event event);
  bool BudgetExpired(const Episode& ep) const;
  bool Admitted() const;

  const std::string actor_id_;
  const ActorOptions options_;
  const SamplingParams sampling_;
  std::unique_ptr<RolloutEngine> engine_;
  const EnvFactory* env_factory_;
  EnvExecutor* executor_;
  const Tokenizer* tokenizer_;
  TaskSource* tasks_;
  TrajectorySink sink_;
  const uint64_t seed_;
  AdmissionRoom admission_;
  std::atomic<int64_t> in_flight_{0};

  std::unordered_map<int64_t, std::unique_ptr<Episode>> episodes_;  // actor thread only
  std::unordered_map<SequenceId, int64_t> by_sequence_;             // actor thread only
  int64_t next_episode_ = 0;
  int64_t started_ = 0;
  int64_t handed_ = 0;

  mutable absl::Mutex mu_;
  absl::CondVar events_cv_;
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t calls_in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // env calls whose callback is pending
  ActorStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel

#endif  // FLYWHEEL_ACTOR_ACTOR_H_
