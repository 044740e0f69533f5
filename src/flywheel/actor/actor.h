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
//
// Elastic scheduling takes an actor off rollout without losing episodes (suspended_episode.h):
//
//   scheduler thread                      actor thread (Run)
//   ────────────────                      ──────────────────
//   A.Suspend() ── request ─────────────▶ stops starting episodes; drops the partial turns of
//      (blocks)                           generating ones; awaits env calls in flight, parking
//                                         each episode at that reply (or finishing it if the
//      ◀── ActorSwitch{episodes, …} ───── reply ended it); frees the sequences; Run returns
//   B.Adopt(episodes) ──────────────────▶ B's Run: re-prefill each history, next policy turn
//   A.Drain() (drain_on_switch) ────────▶ stops starting; in-flight episodes finish into the
//      ◀── ActorSwitch{finished, …} ───── sink as usual; Run returns when none is left
#ifndef FLYWHEEL_ACTOR_ACTOR_H_
#define FLYWHEEL_ACTOR_ACTOR_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/actor/actor_options.h"
#include "flywheel/actor/rollout_engine.h"
#include "flywheel/actor/suspended_episode.h"
#include "flywheel/actor/turn_format.h"
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
  int64_t episodes_started = 0;  // by this actor: trajectory ids actor_id/0 .. /started-1
  int64_t episodes_finished = 0;
  int64_t episodes_failed = 0;  // env-error, protocol error
  int64_t episodes_timed_out = 0;
  int64_t tokens_generated = 0;
  double generation_seconds = 0;   // in engine.Step
  double env_wait_seconds = 0;     // summed over episodes: reset/step/score calls in flight
  double insert_wait_seconds = 0;  // in the sink
  int64_t episodes_suspended = 0;  // handed over by Suspend (those adopted and not yet started too)
  int64_t episodes_adopted = 0;    // taken over from another actor by Adopt, counted when accepted
  int64_t tokens_discarded = 0;  // of policy turns abandoned by Suspend (also in tokens_generated)
  double switch_seconds = 0;     // in Suspend and Drain, summed
};

class Actor {
 public:
  // Everything is borrowed and must outlive the actor, except the engine. The destructor waits
  // for the environment calls still in flight: close the executor first to cut that short.
  Actor(std::string actor_id, const ActorOptions& options, const SamplingParams& sampling,
        std::unique_ptr<RolloutEngine> engine, const EnvFactory* env_factory, EnvExecutor* executor,
        const Tokenizer* tokenizer, TaskSource* tasks, TrajectorySink sink, uint64_t seed,
        const TurnFormat* format = nullptr);  // null: PlainTurnFormat over `tokenizer`
  ~Actor();

  // Runs until `episodes` more episodes have been handed to the sink (negative: until Stop()),
  // or until a Suspend or Drain is served. Never starts more episodes than that, so a colocated
  // step can generate exactly its batch. One Run at a time; a second waits for the first.
  absl::Status Run(int64_t episodes = -1);
  // Makes Run return soon; in-flight episodes are cancelled (not handed to the sink).
  void Stop();
  // Before Run: start an episode only when `room` allows, and whole groups at a time (the
  // members of a group started are always started, so no group waits for admission half-done).
  // Without it only episodes_in_flight limits starts.
  void SetAdmission(AdmissionRoom room) { admission_ = std::move(room); }
  // Wakes a Run waiting for environment events, to look at its admission again (any thread).
  void Wake();
  // Episodes started or adopted and not yet ended or handed over (any thread).
  int64_t in_flight() const {
    return in_flight_.load(std::memory_order_relaxed) +
           adoptions_pending_.load(std::memory_order_relaxed);
  }

  // A Run is in progress (any thread). A Suspend or Drain that comes before Run has begun
  // finds no Run to end: that Run starts episodes as usual.
  bool running() const;

  // Takes the actor off rollout, handing its episodes over (any thread; blocks). Stops starting
  // episodes and brings each in-flight one to its last environment boundary: a generating policy
  // turn is abandoned at once (its tokens dropped), an environment call in flight is awaited
  // (its reply either ends the episode, which then goes to the sink as usual, or parks it). The
  // engine sequences are freed and a running Run returns OK. Episodes adopted but not started yet
  // are handed on as they are. Without a Run in progress the calling thread does this work. Takes
  // as long as the slowest environment call in flight (and the sink, for episodes that end);
  // Stop() cuts it short, leaving the episodes still awaiting a reply here. A later Run starts
  // episodes again. One Suspend or Drain at a time; a second waits for the first.
  absl::StatusOr<ActorSwitch> Suspend();
  // The `scheduler.drain_on_switch` variant: stops starting episodes and lets the in-flight ones
  // (adopted ones included) finish into the sink; returns when none is left, and a running Run
  // returns OK. Otherwise as Suspend.
  absl::StatusOr<ActorSwitch> Drain();
  // Continues another actor's suspended episodes here (any thread, before or during Run): the
  // next Run iteration gives each a new engine sequence over its whole token history and starts
  // its next policy turn with this actor's weights; it finishes into this actor's sink. Adopted
  // episodes count in in_flight() and may push it above episodes_in_flight until they end
  // (no new episode starts meanwhile): refusing them would lose them. All or none: an episode
  // that fails SuspendedEpisode::Validate (no environment, misaligned arrays) is an
  // InvalidArgument error and nothing is adopted.
  absl::Status Adopt(std::vector<SuspendedEpisode> episodes);

  void PublishSnapshot(std::shared_ptr<const WeightSnapshot> snapshot) {
    engine_->PublishSnapshot(std::move(snapshot));
  }
  int64_t version() const { return engine_->version(); }
  ActorStats stats() const;
  // Policy tokens generated so far by each episode in flight, as of the last decode step (any
  // thread): the elastic scheduler's remaining-work estimate in tokens starts from these.
  std::vector<int64_t> InFlightPolicyTokens() const;

 private:
  struct Episode;
  struct Event {
    int64_t episode;
    enum Kind { kReset, kStep, kScore } kind;
    absl::StatusOr<StepResult> result;  // kScore carries the score in partial_score
  };

  enum class Request { kNone, kSuspend, kDrain };

  absl::Status StartEpisode();
  absl::Status StartAdopted();
  absl::Status HandleEvents(std::deque<Event> events);
  absl::Status HandleEvent(Event event);
  absl::Status HandleGenerated(const GeneratedToken& token);
  // Appends the environment's turn and starts the policy's, or ends the episode as kMaxTurns,
  // scored by `partial`, when the context has no room for another turn.
  absl::Status StartPolicyTurn(Episode& ep, const std::string& observation,
                               std::optional<double> partial);
  absl::Status Finish(Episode& ep, Termination termination, std::optional<double> partial);
  // The episode is at an environment boundary: `observation` opens its next policy turn.
  void AtBoundary(Episode& ep, const std::string& observation);
  // Moves `ep` (at a boundary, or generating: its partial turn is dropped) into switching_.
  absl::Status Park(Episode& ep);
  // Waits for environment events (briefly, and only when nothing is generating) and takes them.
  std::deque<Event> TakeEvents();
  // One round of the loop: environment events, then one decode step.
  absl::Status Pump();
  absl::Status RunEpisodes(int64_t episodes);
  // The work of a switch, on the thread that drives the episodes.
  absl::StatusOr<ActorSwitch> Serve(Request request);
  absl::Status SuspendEpisodes();
  absl::Status DrainEpisodes();
  absl::StatusOr<ActorSwitch> Switch(Request request);
  void PostSwitch(absl::StatusOr<ActorSwitch> result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Serves the switches requested while the caller drove the episodes, then lets them go.
  absl::Status ReleaseDriver(absl::Status run) ABSL_LOCKS_EXCLUDED(mu_);
  Request PendingRequest() const ABSL_LOCKS_EXCLUDED(mu_);
  bool SwitchFree() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return request_ == Request::kNone && !switch_result_.has_value();
  }
  bool SwitchServed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return switch_result_.has_value();
  }
  // Something for the episodes' loop to look at before waiting for environment events.
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Stopped() const ABSL_LOCKS_EXCLUDED(mu_);
  void UpdateInFlight() ABSL_LOCKS_EXCLUDED(mu_);
  void BeginCall(Episode& ep);
  // run.trace: the episode's waits for its environment calls, on the track of its episode slot
  // ("episode K / actor-N"). An episode takes the lowest free slot when its first call starts
  // and gives it back when it ends or is handed over, so a slot's spans never overlap.
  void TakeTraceSlot(Episode& ep);
  void TraceEnvWait(Episode& ep);  // the env call that just came back, on the episode's slot
  void ReleaseTraceSlot(Episode& ep);
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
  std::unique_ptr<PlainTurnFormat> plain_format_;  // when no format was given
  const TurnFormat* format_;
  TaskSource* tasks_;
  TrajectorySink sink_;
  const uint64_t seed_;
  AdmissionRoom admission_;
  std::atomic<int64_t> in_flight_{0};

  std::atomic<int64_t> adoptions_pending_{0};  // in adopted_, not started yet

  // "Actor thread only": the thread that drives the episodes (driving_): Run, or a Suspend or
  // Drain called without a Run.
  std::unordered_map<int64_t, std::unique_ptr<Episode>> episodes_;  // actor thread only
  std::unordered_map<SequenceId, int64_t> by_sequence_;             // actor thread only
  int64_t next_episode_ = 0;
  int64_t started_ = 0;
  int64_t handed_ = 0;
  ActorSwitch* switching_ = nullptr;  // actor thread only: the switch being served, if any
  bool parking_ = false;              // actor thread only: episodes at a boundary are parked
  bool warned_context_full_ = false;  // actor thread only: the context-full warning was logged
  // Actor thread only: trace slots handed out so far, and those free again (lowest first).
  int trace_slots_ = 0;
  std::priority_queue<int, std::vector<int>, std::greater<int>> free_trace_slots_;

  mutable absl::Mutex mu_;
  absl::CondVar events_cv_;
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t calls_in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // env calls whose callback is pending
  ActorStats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> in_flight_tokens_ ABSL_GUARDED_BY(mu_);  // InFlightPolicyTokens
  // A thread drives the episodes (see "actor thread only" above); Run waits for it to be free.
  bool driving_ ABSL_GUARDED_BY(mu_) = false;
  bool running_ ABSL_GUARDED_BY(mu_) = false;  // inside Run (which may be waiting to drive)
  std::vector<SuspendedEpisode> adopted_ ABSL_GUARDED_BY(mu_);  // not started yet
  // The switch asked for and not yet served; its result waits here for the caller to take it.
  Request request_ ABSL_GUARDED_BY(mu_) = Request::kNone;
  absl::Time request_time_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::StatusOr<ActorSwitch>> switch_result_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel

#endif  // FLYWHEEL_ACTOR_ACTOR_H_
