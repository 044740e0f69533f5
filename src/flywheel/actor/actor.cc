#include "flywheel/actor/actor.h"

#include <spdlog/spdlog.h>

#include "flywheel/core/emulated_device.h"
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
  absl::Time started;           // the reset came back: the time budget counts from here
  absl::Time call_started;      // when the env call in flight began
  bool call_in_flight = false;  // otherwise a policy turn is generating
  // The last environment boundary: the reply that opened the current policy turn, and the
  // trajectory's size before its tokens. Suspend cuts the trajectory back to it.
  std::string observation;
  int64_t turn_start = 0;
};

namespace {

// Tokens of the environment's turn that follows `t`: BOS first in a new trajectory, and an
// end-of-turn closing a policy turn that max_new_tokens cut before a stop token.
std::vector<int64_t> ObservationTurn(const Trajectory& t, const std::vector<int64_t>& observation,
                                     const SpecialTokens& special) {
  std::vector<int64_t> tokens;
  if (t.tokens.empty()) tokens.push_back(special.bos);
  if (!t.tokens.empty() && t.trainable.back() && t.tokens.back() != special.end_of_turn &&
      t.tokens.back() != special.eos) {
    tokens.push_back(special.end_of_turn);
  }
  tokens.insert(tokens.end(), observation.begin(), observation.end());
  tokens.push_back(special.end_of_turn);
  return tokens;
}

}  // namespace

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
  ep.call_in_flight = true;
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
  // Numbered by starts, not by index: adopted episodes take indices too.
  t.id = StrCat(actor_id_, "/", started_);
  t.execution_id = t.id;
  t.group_id = StrCat(ep->task.task, "/", ep->task.seed);
  t.task_id = StrCat(ep->task.task, "/", ep->task.seed);
  t.env_name = ep->task.task;
  t.actor_id = actor_id_;
  t.created_unix_ns = absl::ToUnixNanos(ep->started);
  BeginCall(*ep);
  Episode* raw = ep.get();
  episodes_[ep->index] = std::move(ep);
  UpdateInFlight();
  ++started_;
  {
    absl::MutexLock lock(&mu_);
    ++stats_.episodes_started;
  }
  const int64_t index = raw->index;
  executor_->StartReset(raw->env.get(), raw->task, [this, index](absl::StatusOr<StepResult> r) {
    Post(Event{index, Event::kReset, std::move(r)});
  });
  return absl::OkStatus();
}

void Actor::UpdateInFlight() {
  in_flight_.store(static_cast<int64_t>(episodes_.size()), std::memory_order_relaxed);
}

void Actor::AtBoundary(Episode& ep, const std::string& observation) {
  ep.observation = observation;
  ep.turn_start = ep.trajectory.size();
  ep.turn_tokens.clear();
}

absl::Status Actor::StartPolicyTurn(Episode& ep, const std::string& observation) {
  AtBoundary(ep, observation);
  // The environment's turn: its text closed by end-of-turn (BOS first), never trainable.
  auto encoded = tokenizer_->Encode(observation);
  if (!encoded.ok()) {
    spdlog::warn("{} episode {}: observation not in the vocabulary: {}", actor_id_, ep.index,
                 encoded.status().message());
    return Finish(ep, Termination::kEnvError, std::nullopt);
  }
  const SpecialTokens& special = tokenizer_->special();
  const std::vector<int64_t> tokens = ObservationTurn(ep.trajectory, *encoded, special);
  for (int64_t token : tokens) ep.trajectory.AppendPrompt(static_cast<int32_t>(token));

  if (ep.sequence < 0) {
    // A new episode, or one adopted from another actor: the sequence holds the whole history,
    // prefilled with this engine's weights at its next Step.
    SequenceOptions seq;
    seq.sampling = sampling_;
    seq.seed = MixSeed(seed_ ^ MixSeed(static_cast<uint64_t>(ep.index)));
    const std::vector<int64_t> history(ep.trajectory.tokens.begin(), ep.trajectory.tokens.end());
    ASSIGN_OR_RETURN(ep.sequence, engine_->AddSequence(history, seq));
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
  ep.call_in_flight = false;
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
  if (parking_) {
    // Suspending: the reply is this episode's last environment boundary; it continues elsewhere.
    AtBoundary(ep, r.observation);
    return Park(ep);
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
  UpdateInFlight();

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
  if (switching_ != nullptr) ++switching_->finished_in_place;
  return absl::OkStatus();
}

bool Actor::Admitted() const {
  if (!admission_) return true;
  const int64_t group = tasks_->group_size();
  if (started_ % group != 0) return true;  // the rest of a group already started
  return admission_() >= group;
}

absl::Status Actor::Run(int64_t episodes) {
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](bool* driving) { return !*driving; }, &driving_));
    driving_ = true;
    running_ = true;
  }
  absl::Status s = ReleaseDriver(RunEpisodes(episodes));
  absl::MutexLock lock(&mu_);
  running_ = false;
  return s;
}

bool Actor::running() const {
  absl::MutexLock lock(&mu_);
  return running_;
}

absl::Status Actor::RunEpisodes(int64_t episodes) {
  const int64_t target = episodes < 0 ? -1 : handed_ + episodes;
  const int64_t start_limit = episodes < 0 ? -1 : started_ + episodes;
  auto done = [&] { return target >= 0 && handed_ >= target; };
  while (!done()) {
    // A switch is served by ReleaseDriver, on the way out.
    if (Stopped() || PendingRequest() != Request::kNone) break;
    RETURN_IF_ERROR(StartAdopted());
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
    RETURN_IF_ERROR(Pump());
  }
  return absl::OkStatus();
}

bool Actor::HasWork() const {
  return !events_.empty() || stop_ || (switching_ == nullptr && request_ != Request::kNone) ||
         (!parking_ && !adopted_.empty());
}

std::deque<Actor::Event> Actor::TakeEvents() {
  std::deque<Event> events;
  absl::MutexLock lock(&mu_);
  // Nothing to decode: wait for a reply, a switch or an adoption (the deadline re-checks
  // admission, which has no signal of its own).
  if (engine_->num_generating() == 0 && !HasWork()) {
    events_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
  }
  events.swap(events_);
  return events;
}

absl::Status Actor::HandleEvents(std::deque<Event> events) {
  for (Event& e : events) RETURN_IF_ERROR(HandleEvent(std::move(e)));
  return absl::OkStatus();
}

absl::Status Actor::Pump() {
  RETURN_IF_ERROR(HandleEvents(TakeEvents()));
  if (engine_->num_generating() == 0) return absl::OkStatus();
  const absl::Time before = absl::Now();
  ASSIGN_OR_RETURN(std::vector<GeneratedToken> tokens, engine_->Step());
  const absl::Duration busy = EmulateDeviceTime(absl::Now() - before);  // emulated_device.h
  {
    absl::MutexLock lock(&mu_);
    stats_.generation_seconds += absl::ToDoubleSeconds(busy);
    stats_.tokens_generated += static_cast<int64_t>(tokens.size());
  }
  for (const GeneratedToken& g : tokens) RETURN_IF_ERROR(HandleGenerated(g));
  return absl::OkStatus();
}

bool Actor::Stopped() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

Actor::Request Actor::PendingRequest() const {
  absl::MutexLock lock(&mu_);
  return request_;
}

// ---- Elastic scheduling: Suspend, Drain, Adopt ----------------------------------------------

absl::StatusOr<ActorSwitch> Actor::Suspend() { return Switch(Request::kSuspend); }

absl::StatusOr<ActorSwitch> Actor::Drain() { return Switch(Request::kDrain); }

absl::StatusOr<ActorSwitch> Actor::Switch(Request request) {
  mu_.Lock();
  // One switch at a time: the previous caller takes its result first.
  mu_.Await(absl::Condition(this, &Actor::SwitchFree));
  request_ = request;
  request_time_ = absl::Now();
  if (driving_) {
    events_cv_.SignalAll();  // a Run waiting for environment events looks at the request now
    mu_.Await(absl::Condition(this, &Actor::SwitchServed));
  } else {
    // No Run holds the episodes: this thread drives them through the switch.
    driving_ = true;
    mu_.Unlock();
    ReleaseDriver(absl::OkStatus()).IgnoreError();  // the result carries the status
    mu_.Lock();
  }
  absl::StatusOr<ActorSwitch> result = std::move(*switch_result_);
  switch_result_.reset();
  mu_.Unlock();
  return result;
}

absl::Status Actor::ReleaseDriver(absl::Status run) {
  mu_.Lock();
  if (request_ != Request::kNone) {
    if (!run.ok()) {
      PostSwitch(run);  // the episodes' loop failed: the switch fails with it
    } else {
      const Request request = request_;
      mu_.Unlock();
      absl::StatusOr<ActorSwitch> result = Serve(request);
      mu_.Lock();
      if (!result.ok()) run = result.status();
      PostSwitch(std::move(result));
    }
  }
  driving_ = false;
  mu_.Unlock();
  return run;
}

void Actor::PostSwitch(absl::StatusOr<ActorSwitch> result) {
  if (result.ok()) stats_.switch_seconds += absl::ToDoubleSeconds(result->elapsed);
  switch_result_ = std::move(result);
  request_ = Request::kNone;
}

absl::StatusOr<ActorSwitch> Actor::Serve(Request request) {
  ActorSwitch out;
  switching_ = &out;
  parking_ = request == Request::kSuspend;
  const absl::Status s = parking_ ? SuspendEpisodes() : DrainEpisodes();
  switching_ = nullptr;
  parking_ = false;
  RETURN_IF_ERROR(s);
  absl::MutexLock lock(&mu_);
  out.elapsed = absl::Now() - request_time_;
  return out;
}

absl::Status Actor::SuspendEpisodes() {
  // A generating episode is at its boundary once its partial turn is dropped.
  std::vector<Episode*> generating;
  for (auto& [index, ep] : episodes_) {
    if (!ep->call_in_flight) generating.push_back(ep.get());
  }
  for (Episode* ep : generating) RETURN_IF_ERROR(Park(*ep));
  // The others wait on an environment call (calls on one environment must not overlap, and the
  // reply is part of the episode): HandleEvent parks each at its reply, or finishes it.
  while (!episodes_.empty() && !Stopped()) RETURN_IF_ERROR(HandleEvents(TakeEvents()));
  // Adopted here but never started: handed on as they came.
  absl::MutexLock lock(&mu_);
  adoptions_pending_.fetch_sub(static_cast<int64_t>(adopted_.size()));
  for (SuspendedEpisode& s : adopted_) switching_->episodes.push_back(std::move(s));
  adopted_.clear();
  return absl::OkStatus();
}

absl::Status Actor::DrainEpisodes() {
  // Adopted episodes are this actor's too: they finish here. Those adopted after the last one
  // ended wait for the next Run.
  while (!Stopped()) {
    RETURN_IF_ERROR(StartAdopted());
    if (episodes_.empty()) break;
    RETURN_IF_ERROR(Pump());
  }
  return absl::OkStatus();
}

absl::Status Actor::Park(Episode& ep) {
  // A turn still generating is abandoned: the adopter samples it again, whole, with its own
  // weights, so no turn mixes two actors' tokens (suspended_episode.h).
  const int64_t discarded = static_cast<int64_t>(ep.turn_tokens.size());
  TruncateTrajectory(ep.trajectory, ep.turn_start);
  if (ep.sequence >= 0) {
    RETURN_IF_ERROR(engine_->RemoveSequence(ep.sequence));
    by_sequence_.erase(ep.sequence);
  }
  SuspendedEpisode s;
  s.task = std::move(ep.task);
  s.env = std::move(ep.env);
  s.trajectory = std::move(ep.trajectory);
  s.observation = std::move(ep.observation);
  s.turns = ep.turns;
  s.total_reward = ep.total_reward;
  s.budget_used = absl::Now() - ep.started;
  switching_->episodes.push_back(std::move(s));
  switching_->tokens_discarded += discarded;
  episodes_.erase(ep.index);  // `ep` is gone from here on
  UpdateInFlight();
  absl::MutexLock lock(&mu_);
  ++stats_.episodes_suspended;
  stats_.tokens_discarded += discarded;
  return absl::OkStatus();
}

absl::Status Actor::Adopt(std::vector<SuspendedEpisode> episodes) {
  for (const SuspendedEpisode& s : episodes) {
    const absl::Status valid = s.Validate(tokenizer_->vocab_size());
    if (!valid.ok()) {
      return absl::Status(valid.code(), StrCat(actor_id_, ": Adopt: ", valid.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  adoptions_pending_.fetch_add(static_cast<int64_t>(episodes.size()));
  for (SuspendedEpisode& s : episodes) adopted_.push_back(std::move(s));
  events_cv_.SignalAll();
  return absl::OkStatus();
}

absl::Status Actor::StartAdopted() {
  std::vector<SuspendedEpisode> adopted;
  {
    absl::MutexLock lock(&mu_);
    if (adopted_.empty()) return absl::OkStatus();
    adopted.swap(adopted_);
    stats_.episodes_adopted += static_cast<int64_t>(adopted.size());
  }
  for (SuspendedEpisode& s : adopted) {
    auto ep = std::make_unique<Episode>();
    ep->index = next_episode_++;
    ep->task = std::move(s.task);
    ep->env = std::move(s.env);
    ep->trajectory = std::move(s.trajectory);
    ep->turns = s.turns;
    ep->total_reward = s.total_reward;
    // The budget goes on from where the other actor left it.
    ep->started = absl::Now() - s.budget_used;
    Episode& raw = *ep;
    episodes_[raw.index] = std::move(ep);
    UpdateInFlight();
    adoptions_pending_.fetch_sub(1);
    RETURN_IF_ERROR(StartPolicyTurn(raw, s.observation));
  }
  return absl::OkStatus();
}

}  // namespace flywheel
