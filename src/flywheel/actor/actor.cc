#include "flywheel/actor/actor.h"

#include <spdlog/spdlog.h>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {

struct Actor::Episode {
  int64_t index = 0;
  TaskInstance task;
  std::unique_ptr<Environment> env;
  SequenceId sequence = -1;
  Trajectory trajectory;
  std::vector<int64_t> turn_tokens;  // generated in the current policy turn
  int64_t turns = 0;
  double total_reward = 0;
  absl::Time started;       // the reset came back: the time budget counts from here
  absl::Time call_started;  // when the env call in flight began
};

Actor::Actor(std::string actor_id, const ActorOptions& options, const SamplingParams& sampling,
             std::unique_ptr<RolloutEngine> engine, const EnvFactory* env_factory,
             EnvExecutor* executor, const Tokenizer* tokenizer, TaskSource* tasks,
             TrajectorySink sink, uint64_t seed)
    : actor_id_(std::move(actor_id)),
      options_(options),
      sampling_(sampling),
      engine_(std::move(engine)),
      env_factory_(env_factory),
      executor_(executor),
      tokenizer_(tokenizer),
      tasks_(tasks),
      sink_(std::move(sink)),
      seed_(seed) {}

Actor::~Actor() {
  Stop();
  // Executor callbacks refer to this actor and to the episodes' environments: wait until every
  // call in flight has come back (closing the executor makes pending ones return at once).
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int64_t* calls) { return *calls == 0; }, &calls_in_flight_));
}

void Actor::Stop() {
  absl::MutexLock lock(&mu_);
  stop_ = true;
  events_cv_.SignalAll();
}

void Actor::Wake() {
  absl::MutexLock lock(&mu_);
  events_cv_.SignalAll();
}

ActorStats Actor::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void Actor::Post(Event event) {
  absl::MutexLock lock(&mu_);
  --calls_in_flight_;
  events_.push_back(std::move(event));
  events_cv_.Signal();
}

void Actor::BeginCall(Episode& ep) {
  ep.call_started = absl::Now();
  absl::MutexLock lock(&mu_);
  ++calls_in_flight_;
}

bool Actor::BudgetExpired(const Episode& ep) const {
  return options_.episode_time_budget_s > 0 &&
         absl::Now() - ep.started > absl::Seconds(options_.episode_time_budget_s);
}

absl::Status Actor::StartEpisode() {
  auto ep = std::make_unique<Episode>();
  ep->index = next_episode_++;
  ep->task = tasks_->Next();
  ep->env = env_factory_->NewEnvironment();
  ep->started = absl::Now();
  Trajectory& t = ep->trajectory;
  t.id = StrCat(actor_id_, "/", ep->index);
  t.execution_id = t.id;
  t.group_id = StrCat(ep->task.task, "/", ep->task.seed);
  t.task_id = StrCat(ep->task.task, "/", ep->task.seed);
  t.env_name = ep->task.task;
  t.actor_id = actor_id_;
  t.created_unix_ns = absl::ToUnixNanos(ep->started);
  BeginCall(*ep);
  Episode* raw = ep.get();
  episodes_[ep->index] = std::move(ep);
  in_flight_.store(static_cast<int64_t>(episodes_.size()), std::memory_order_relaxed);
  ++started_;
  const int64_t index = raw->index;
  executor_->StartReset(raw->env.get(), raw->task, [this, index](absl::StatusOr<StepResult> r) {
    Post(Event{index, Event::kReset, std::move(r)});
  });
  return absl::OkStatus();
}

absl::Status Actor::StartPolicyTurn(Episode& ep, const std::string& observation) {
  // The environment's turn: its text closed by end-of-turn (BOS first), never trainable.
  auto encoded = tokenizer_->Encode(observation);
  if (!encoded.ok()) {
    spdlog::warn("{} episode {}: observation not in the vocabulary: {}", actor_id_, ep.index,
                 encoded.status().message());
    return Finish(ep, Termination::kEnvError, std::nullopt);
  }
  std::vector<int64_t> tokens;
  const SpecialTokens& special = tokenizer_->special();
  if (ep.sequence < 0) tokens.push_back(special.bos);
  // A policy turn cut by max_new_tokens ended without a stop token: close it for the model.
  if (!ep.turn_tokens.empty() && ep.turn_tokens.back() != special.end_of_turn &&
      ep.turn_tokens.back() != special.eos) {
    tokens.push_back(special.end_of_turn);
  }
  tokens.insert(tokens.end(), encoded->begin(), encoded->end());
  tokens.push_back(special.end_of_turn);
  for (int64_t token : tokens) ep.trajectory.AppendPrompt(static_cast<int32_t>(token));
  ep.turn_tokens.clear();

  if (ep.sequence < 0) {
    SequenceOptions seq;
    seq.sampling = sampling_;
    seq.seed = MixSeed(seed_ ^ MixSeed(static_cast<uint64_t>(ep.index)));
    ASSIGN_OR_RETURN(ep.sequence, engine_->AddSequence(tokens, seq));
    by_sequence_[ep.sequence] = ep.index;
  } else {
    RETURN_IF_ERROR(engine_->AppendTokens(ep.sequence, tokens));
  }
  TurnOptions turn;
  turn.max_new_tokens = options_.max_new_tokens;
  turn.stop_tokens = {special.end_of_turn, special.eos};
  return engine_->StartTurn(ep.sequence, turn);
}

absl::Status Actor::HandleEvent(Event event) {
  auto it = episodes_.find(event.episode);
  if (it == episodes_.end()) return absl::OkStatus();
  Episode& ep = *it->second;
  {
    absl::MutexLock lock(&mu_);
    stats_.env_wait_seconds += absl::ToDoubleSeconds(absl::Now() - ep.call_started);
  }
  if (!event.result.ok()) {
    if (absl::IsCancelled(event.result.status())) {
      return Finish(ep, Termination::kCancelled, std::nullopt);
    }
    spdlog::warn("{} episode {} ({}): {}", actor_id_, ep.index, ep.trajectory.task_id,
                 event.result.status().message());
    return Finish(ep, Termination::kEnvError, std::nullopt);
  }
  StepResult& r = *event.result;
  // The time budget counts from the reset: waiting for an environment copy is not the episode's own
  // time.
  if (event.kind == Event::kReset) ep.started = absl::Now();
  if (event.kind == Event::kScore) {
    return Finish(ep, Termination::kTimeout, r.partial_score);
  }
  if (event.kind == Event::kStep) {
    ep.total_reward += r.reward;
    ep.trajectory.turn_rewards.push_back(static_cast<float>(r.reward));
    ep.trajectory.turn_ends.push_back(static_cast<int32_t>(ep.trajectory.size()));
  }
  if (r.done || r.end != EpisodeEnd::kRunning) {
    switch (r.end) {
      case EpisodeEnd::kTimeout:
        return Finish(ep, Termination::kTimeout, r.partial_score);
      case EpisodeEnd::kEnvError:
      case EpisodeEnd::kProtocolError:
        return Finish(ep, Termination::kEnvError, r.partial_score);
      default:
        return Finish(ep, Termination::kDone, r.partial_score);
    }
  }
  if (ep.turns >= options_.max_turns) {
    return Finish(ep, Termination::kMaxTurns, r.partial_score);
  }
  if (BudgetExpired(ep)) {
    BeginCall(ep);
    const int64_t index = ep.index;
    executor_->StartScorePartial(ep.env.get(), [this, index](absl::StatusOr<double> score) {
      StepResult scored;
      if (score.ok()) scored.partial_score = *score;
      Post(Event{index, Event::kScore,
                 score.ok() ? absl::StatusOr<StepResult>(std::move(scored)) : score.status()});
    });
    return absl::OkStatus();
  }
  return StartPolicyTurn(ep, r.observation);
}

absl::Status Actor::HandleGenerated(const GeneratedToken& g) {
  auto seq = by_sequence_.find(g.sequence);
  if (seq == by_sequence_.end()) return absl::OkStatus();
  Episode& ep = *episodes_.at(seq->second);
  ep.trajectory.AppendGenerated(static_cast<int32_t>(g.token), g.logprob, g.version);
  ep.turn_tokens.push_back(g.token);
  if (g.end == TurnEnd::kNone) return absl::OkStatus();

  ++ep.turns;
  if (g.end == TurnEnd::kMaxLength) return Finish(ep, Termination::kMaxTurns, std::nullopt);
  std::vector<int64_t> action_ids = ep.turn_tokens;
  const SpecialTokens& special = tokenizer_->special();
  if (!action_ids.empty() &&
      (action_ids.back() == special.end_of_turn || action_ids.back() == special.eos)) {
    action_ids.pop_back();
  }
  ASSIGN_OR_RETURN(std::string action, tokenizer_->Decode(action_ids));
  BeginCall(ep);
  const int64_t index = ep.index;
  executor_->StartStep(ep.env.get(), std::move(action),
                       [this, index](absl::StatusOr<StepResult> r) {
                         Post(Event{index, Event::kStep, std::move(r)});
                       });
  return absl::OkStatus();
}

absl::Status Actor::Finish(Episode& ep, Termination termination, std::optional<double> partial) {
  if (ep.sequence >= 0) {
    RETURN_IF_ERROR(engine_->RemoveSequence(ep.sequence));
    by_sequence_.erase(ep.sequence);
  }
  ep.env->Close();
  Trajectory t = std::move(ep.trajectory);
  const int64_t index = ep.index;
  episodes_.erase(index);  // `ep` is gone from here on
  in_flight_.store(static_cast<int64_t>(episodes_.size()), std::memory_order_relaxed);

  t.termination = termination;
  t.finished_unix_ns = absl::ToUnixNanos(absl::Now());
  if (partial) t.partial_score = static_cast<float>(*partial);
  float reward = 0;
  for (float r : t.turn_rewards) reward += r;
  // A timed-out episode is scored by its progress, so slow hard tasks still teach something.
  if (termination == Termination::kTimeout && t.partial_score) reward = *t.partial_score;
  t.final_reward = reward;
  {
    absl::MutexLock lock(&mu_);
    if (termination == Termination::kEnvError) ++stats_.episodes_failed;
    if (termination == Termination::kTimeout) ++stats_.episodes_timed_out;
  }
  // Cancelled episodes and those the policy never acted in carry nothing to train on.
  if (termination == Termination::kCancelled || t.NumTrainable() == 0) return absl::OkStatus();

  const absl::Time before = absl::Now();
  absl::Status s = sink_(std::move(t));
  absl::MutexLock lock(&mu_);
  stats_.insert_wait_seconds += absl::ToDoubleSeconds(absl::Now() - before);
  if (!s.ok()) return s;
  ++stats_.episodes_finished;
  ++handed_;
  return absl::OkStatus();
}

bool Actor::Admitted() const {
  if (!admission_) return true;
  const int64_t group = tasks_->group_size();
  if (started_ % group != 0) return true;  // the rest of a group already started
  return admission_() >= group;
}

absl::Status Actor::Run(int64_t episodes) {
  const int64_t target = episodes < 0 ? -1 : handed_ + episodes;
  const int64_t start_limit = episodes < 0 ? -1 : started_ + episodes;
  auto done = [&] { return target >= 0 && handed_ >= target; };
  while (!done()) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) break;
    }
    // Keep the pipe full, but never start more than this call may hand over.
    while (static_cast<int64_t>(episodes_.size()) < options_.episodes_in_flight &&
           (start_limit < 0 || started_ < start_limit) && Admitted()) {
      RETURN_IF_ERROR(StartEpisode());
    }
    if (target >= 0 && episodes_.empty() && started_ >= start_limit) {
      // Every episode this call could start has ended, some without a trajectory to hand over
      // (cancelled, or no policy turn): start more until the count is reached.
      RETURN_IF_ERROR(StartEpisode());
    }
    std::deque<Event> events;
    {
      absl::MutexLock lock(&mu_);
      if (events_.empty() && engine_->num_generating() == 0 && !stop_) {
        events_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
      }
      events.swap(events_);
    }
    for (Event& e : events) RETURN_IF_ERROR(HandleEvent(std::move(e)));

    if (engine_->num_generating() > 0) {
      const absl::Time before = absl::Now();
      ASSIGN_OR_RETURN(std::vector<GeneratedToken> tokens, engine_->Step());
      {
        absl::MutexLock lock(&mu_);
        stats_.generation_seconds += absl::ToDoubleSeconds(absl::Now() - before);
        stats_.tokens_generated += static_cast<int64_t>(tokens.size());
      }
      for (const GeneratedToken& g : tokens) RETURN_IF_ERROR(HandleGenerated(g));
    }
  }
  return absl::OkStatus();
}

}  // namespace flywheel
