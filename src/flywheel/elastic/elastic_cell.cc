#include "flywheel/elastic/elastic_cell.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "flywheel/core/emulated_device.h"
#include "flywheel/core/host_port.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/dist/rendezvous.h"
#include "flywheel/runtime/learner_group.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/remote_buffer.h"
#include "flywheel/runtime/remote_connect.h"
#include "flywheel/runtime/transformer_policy.h"
#include "flywheel/weights/client.h"

namespace flywheel {
namespace {

// How often a rolling-out cell asks for newer weights when no grant needs them.
constexpr absl::Duration kWeightsPoll = absl::Milliseconds(100);
// One claim's wait for a micro-step: how late a training cell sees that it is to roll out.
constexpr absl::Duration kClaimPoll = absl::Milliseconds(20);
// One wait for the step's participants before the loop rechecks a stop request.
constexpr absl::Duration kReducePoll = absl::Seconds(1);

}  // namespace

void PublishedWeights::Publish(std::shared_ptr<const WeightSnapshot> snapshot) {
  absl::MutexLock lock(&mu_);
  latest_ = std::move(snapshot);
}

absl::StatusOr<std::shared_ptr<const WeightSnapshot>> PublishedWeights::Newer(
    int64_t have_version) {
  absl::MutexLock lock(&mu_);
  if (latest_ == nullptr || latest_->version <= have_version) return nullptr;
  return latest_;
}

absl::StatusOr<std::unique_ptr<ElasticCell>> ElasticCell::Create(const JobConfig& config,
                                                                 CellLinks links) {
  std::unique_ptr<ElasticCell> cell(new ElasticCell(config, std::move(links)));
  RETURN_IF_ERROR(cell->Init());
  return cell;
}

ElasticCell::~ElasticCell() { Finish(); }

void ElasticCell::Log(const std::string& line) {
  if (links_.log == nullptr) return;
  std::fprintf(links_.log, "cell %d: %s\n", cell_, line.c_str());
  std::fflush(links_.log);
}

absl::Status ElasticCell::Init() {
  v1::RegisterRequest request;
  request.set_config_hash(JobConfigHash(config_));
  request.set_model_hash(ElasticModelHash(links_.model_options));
  request.set_name(links_.name);
  ASSIGN_OR_RETURN(registration_, links_.scheduler->Register(request, links_.connect_timeout));
  cell_ = registration_.cell();
  // Heartbeats from now on: the core declares a silent cell dead, and building the replica may
  // take a while.
  beats_ = std::make_unique<HeartbeatSender>(
      links_.scheduler, cell_, absl::Milliseconds(registration_.heartbeat_interval_ms()),
      [this](v1::HeartbeatRequest& r) { Report(r); });
  ASSIGN_OR_RETURN(store_, links_.connect_store(registration_));
  dist::MembershipOptions membership;
  membership.group.name = "elastic step group";
  membership.group.timeout =
      std::chrono::milliseconds(absl::ToInt64Milliseconds(links_.connect_timeout));
  membership.group.threads = 1;
  membership_ = std::make_unique<dist::Membership>(store_, membership);
  group_ = std::make_unique<StepGroup>(membership_.get(), cell_);
  ASSIGN_OR_RETURN(weights_, links_.connect_weights(registration_));
  std::shared_ptr<const WeightSnapshot> snapshot;
  RETURN_IF_ERROR(WaitForService(
      "the core's weights", links_.scheduler->Describe(), links_.connect_timeout,
      [&]() -> absl::Status {
        ASSIGN_OR_RETURN(snapshot, weights_->Newer(-1));
        if (snapshot == nullptr) return absl::UnavailableError("no weights published yet");
        return absl::OkStatus();
      },
      links_.stop));

  ASSIGN_OR_RETURN(model_, MakeInitialModel(links_.model_options));
  learner_ = std::make_unique<StreamingLearner>(
      config_.learner, config_.run.max_steps, model_->parameters(), TransformerPolicy(model_),
      nullptr, config_.sampling.temperature, 0, RealClock(),
      OptimizerShard::Satellite(static_cast<int>(config_.scheduler.core_cells)));
  // Task streams differ per cell and per start: a replacement cell does not replay (and collide
  // with) the group ids of the one it replaces.
  const uint64_t seed = links_.seed + static_cast<uint64_t>(cell_) * 7919u;
  tasks_ =
      std::make_unique<TaskSource>(links_.factory->task_name(), seed, config_.actor.group_size);
  remaining_ = std::make_unique<scheduler::RemainingTokens>(
      scheduler::RemainingTokens::kWindow, static_cast<double>(config_.actor.max_new_tokens));
  ASSIGN_OR_RETURN(std::unique_ptr<RolloutEngine> engine,
                   RolloutEngine::Create(config_.actor.engine, snapshot));
  engine_version_ = snapshot->version;
  actor_ = std::make_unique<Actor>(
      StrCat("cell-", cell_, "@", fmt::format("{:x}", seed % 0xffffff)), config_.actor,
      config_.sampling, std::move(engine), links_.factory, links_.executor,
      links_.text->tokenizer.get(), tasks_.get(),
      [this](Trajectory t) { return Insert(std::move(t)); }, seed + 1,
      links_.text->turn_format.get());
  actor_->SetAdmission([this] { return admit_until_.load() - Dispatched(); });
  ready_ = true;
  Log(StrCat("registered with ", links_.scheduler->Describe(), ", weights version ",
             snapshot->version));
  return absl::OkStatus();
}

int64_t ElasticCell::Dispatched() const {
  return tasks_->handed_out() + adopted_.load() - handed_.load();
}

void ElasticCell::Report(v1::HeartbeatRequest& request) {
  request.set_role(static_cast<v1::CellRole>(role_.load()));
  if (!ready_.load()) return;  // still starting: nothing started, nothing finished
  // Finished first: every episode counted finished was started (or adopted) before it was read.
  request.set_finished(inserted_.load() + actor_->stats().episodes_failed);
  request.set_dispatched(Dispatched());
  request.set_episodes_handed(handed_.load());
  request.set_finished_in_place(in_place_.load());
  request.set_weights_version(engine_version_.load());
  request.set_remaining_tokens(remaining_->Remaining(actor_->InFlightPolicyTokens()));
}

absl::Status ElasticCell::Insert(Trajectory trajectory) {
  remaining_->Observe(trajectory.NumTrainable());
  RETURN_IF_ERROR(links_.insert(std::move(trajectory)));
  inserted_.fetch_add(1);
  return absl::OkStatus();
}

absl::StatusOr<v1::HeartbeatResponse> ElasticCell::Latest() {
  const absl::Time deadline = absl::Now() + links_.connect_timeout;
  while (true) {
    absl::StatusOr<v1::HeartbeatResponse> hb = beats_->latest();
    if (hb.ok() || !IsTransient(hb.status())) return hb;
    if (StopRequested()) return absl::CancelledError("stop requested");
    if (absl::Now() > deadline) {
      return absl::UnavailableError(StrCat("lost ", links_.scheduler->Describe(), " for ",
                                           absl::ToDoubleSeconds(links_.connect_timeout),
                                           " s: ", hb.status().message()));
    }
    beats_->AwaitReply(beats_->sent(), absl::Now() + absl::Milliseconds(50));
  }
}

absl::Status ElasticCell::StartActor() {
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(actor_status_);
    actor_running_ = true;
  }
  actor_thread_ = std::thread([this] {
    torch::set_num_threads(1);
    // Returns when StopActor suspends or drains it, or at Stop.
    const absl::Status s = actor_->Run(-1);
    absl::MutexLock lock(&mu_);
    if (!s.ok() && actor_status_.ok() && !stopping_.load()) actor_status_ = s;
    actor_running_ = false;
  });
  // A Suspend or Drain served before Run begins would not end that Run: wait until it runs.
  absl::MutexLock lock(&mu_);
  auto running = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !actor_running_ || actor_->running();
  };
  while (!mu_.AwaitWithTimeout(absl::Condition(&running), absl::Milliseconds(1))) {
  }
  return absl::OkStatus();
}

absl::Status ElasticCell::StopActor() {
  const bool hand_over = links_.desk != nullptr && !config_.scheduler.drain_on_switch;
  absl::StatusOr<ActorSwitch> stopped = hand_over ? actor_->Suspend() : actor_->Drain();
  if (actor_thread_.joinable()) actor_thread_.join();
  RETURN_IF_ERROR(stopped.status());
  in_place_.fetch_add(stopped->finished_in_place);
  if (!stopped->episodes.empty()) {
    // Counted as handed first, so that no report counts them twice (here and parked).
    handed_.fetch_add(static_cast<int64_t>(stopped->episodes.size()));
    links_.desk->Park(std::move(stopped->episodes));
  }
  absl::MutexLock lock(&mu_);
  return actor_status_;
}

void ElasticCell::Switched(bool to_train, absl::Time asked, const std::string& detail) {
  role_ = to_train ? v1::CELL_ROLE_TRAIN : v1::CELL_ROLE_ROLLOUT;
  beats_->Poke();  // the core times the switch until it hears of it
  ++result_.switches;
  Log(StrCat("to ", to_train ? "train" : "rollout", " in ",
             fmt::format("{:.3f}", absl::ToDoubleSeconds(absl::Now() - asked)), " s", detail));
}

absl::Status ElasticCell::RollOut(const v1::HeartbeatResponse& hb) {
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(actor_status_);
  }
  // Newer weights: at once when a grant needs them, else now and then.
  const int64_t have = engine_version_.load();
  if (hb.admit_version() > have || absl::Now() - weights_polled_ >= kWeightsPoll) {
    weights_polled_ = absl::Now();
    absl::StatusOr<std::shared_ptr<const WeightSnapshot>> newer = weights_->Newer(have);
    if (newer.ok() && *newer != nullptr) {
      actor_->PublishSnapshot(*newer);
      engine_version_ = (*newer)->version;
    } else if (!newer.ok() && !IsTransient(newer.status())) {
      return newer.status();
    }
  }
  if (links_.desk != nullptr) {
    std::vector<SuspendedEpisode> adopted = links_.desk->Collect(cell_);
    if (!adopted.empty()) {
      const int64_t n = static_cast<int64_t>(adopted.size());
      RETURN_IF_ERROR(actor_->Adopt(std::move(adopted)));
      adopted_.fetch_add(n);
      beats_->Poke();
    }
  }
  // A grant counts only once the engine holds the weights it was made for.
  if (engine_version_.load() >= hb.admit_version() && hb.admit_until() != admit_until_.load()) {
    admit_until_ = hb.admit_until();
    actor_->Wake();
  }
  return absl::OkStatus();
}

absl::Status ElasticCell::TrainStep(int64_t current) {
  CellChannel& core = *links_.scheduler;
  // The step after the last one this cell was in, without waiting for a heartbeat to name it:
  // Join waits for it to begin, so the cell is there for its first micro-steps.
  const int64_t step = std::max(current, joinable_after_ + 1);
  absl::StatusOr<v1::JoinResponse> joined = core.Join(cell_, step, absl::Now() + kReducePoll);
  if (absl::IsDeadlineExceeded(joined.status())) return absl::OkStatus();  // look at the role again
  if (absl::IsCancelled(joined.status())) {
    // The core is stopping: no step begins any more, and its "finished" follows.
    beats_->AwaitFinished(kReducePoll);
    return absl::OkStatus();
  }
  if (absl::IsFailedPrecondition(joined.status()) || absl::IsAborted(joined.status())) {
    // The step completed (or the core moved on) before this cell joined, or the cell was
    // declared dead in it: the next one.
    joinable_after_ = step;
    beats_->Poke();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(joined.status());
  if (learner_->version() != joined->version()) {
    ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> snapshot, weights_->Newer(-1));
    if (snapshot == nullptr || snapshot->version != joined->version()) {
      // The core published the step's result already: this step is over for this cell.
      RETURN_IF_ERROR(core.Leave(cell_, step, /*exit=*/false).status());
      joinable_after_ = step;
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(learner_->LoadWeights(snapshot->model->parameters(), joined->version(),
                                          joined->optimizer_step()));
  }
  while (true) {
    ASSIGN_OR_RETURN(v1::HeartbeatResponse hb, Latest());
    if (StopRequested() || hb.finished() || hb.role() != v1::CELL_ROLE_TRAIN) {
      // Leave at once, giving back what it ran here (the queue runs it again): a step still
      // being filled may need this very cell's rollouts to complete, so waiting for its reduce
      // could wait for ever.
      absl::StatusOr<int64_t> left = core.Leave(cell_, step, /*exit=*/false);
      if (left.ok()) {
        learner_->AbandonStep();
        return absl::OkStatus();
      }
      // kFailedPrecondition: the step completed with this cell as a participant: reduce it.
      if (!absl::IsFailedPrecondition(left.status())) return left.status();
      break;
    }
    absl::StatusOr<std::shared_ptr<const MicroStep>> ms =
        core.Claim(cell_, step, absl::Now() + kClaimPoll);
    if (absl::IsDeadlineExceeded(ms.status())) continue;
    // Cancelled: the core is stopping; the step completed before (then it is reduced) or never
    // will (AwaitParticipants says which).
    if (absl::IsCancelled(ms.status())) break;
    RETURN_IF_ERROR(ms.status());
    if (*ms == nullptr) break;  // the step is complete
    RETURN_IF_ERROR(learner_->RunMicroStep(**ms));
    RETURN_IF_ERROR(core.Done(cell_, step, (*ms)->id));
    ++result_.micro_steps;
  }
  StepParticipants participants;
  while (true) {
    absl::StatusOr<StepParticipants> p =
        core.AwaitParticipants(cell_, step, absl::Now() + kReducePoll);
    if (absl::IsDeadlineExceeded(p.status()) && !StopRequested()) continue;
    if (absl::IsCancelled(p.status())) return absl::OkStatus();  // it never completes: stopping
    RETURN_IF_ERROR(p.status());
    participants = *std::move(p);
    break;
  }
  ASSIGN_OR_RETURN(dist::Communicator * comm, group_->For(participants));
  absl::StatusOr<StreamingStepResult> result = learner_->FinishStep(comm, participants.normaliser);
  if (!result.ok() && !absl::IsUnavailable(result.status())) return result.status();
  ++result_.steps_trained;
  joinable_after_ = step;
  return absl::OkStatus();
}

absl::StatusOr<ElasticCellResult> ElasticCell::Run() {
  torch::set_num_threads(1);
  result_.cell = cell_;
  RETURN_IF_ERROR(StartActor());
  absl::Status failure;
  int64_t seen = 0;  // heartbeat replies looked at
  while (!StopRequested()) {
    absl::StatusOr<v1::HeartbeatResponse> hb = Latest();
    if (!hb.ok()) {
      failure = hb.status();
      break;
    }
    if (hb->finished()) {
      result_.core_finished = true;
      break;
    }
    const bool in_train = role_.load() == v1::CELL_ROLE_TRAIN;
    if (hb->role() == v1::CELL_ROLE_TRAIN) {
      if (!in_train) {
        const absl::Time asked = absl::Now();
        admit_until_ = 0;  // nothing new starts; the grant goes back to the core
        const int64_t handed = handed_.load();
        failure = StopActor();
        if (!failure.ok()) break;
        Switched(true, asked,
                 links_.desk != nullptr && !config_.scheduler.drain_on_switch
                     ? StrCat(" (", handed_.load() - handed, " episodes handed over)")
                     : " (in-flight episodes finished in place)");
      }
      failure = TrainStep(hb->step());
    } else {
      if (in_train) {
        const absl::Time asked = absl::Now();
        absl::StatusOr<std::shared_ptr<const WeightSnapshot>> newest = weights_->Newer(-1);
        if (!newest.ok()) {
          failure = newest.status();
          break;
        }
        if (*newest != nullptr) {
          actor_->PublishSnapshot(*newest);
          engine_version_ = (*newest)->version;
        }
        failure = StartActor();
        if (!failure.ok()) break;
        Switched(false, asked, StrCat(", weights version ", engine_version_.load()));
      }
      failure = RollOut(*hb);
      // Until the next reply: a role, a grant or adopted episodes come with one.
      seen = beats_->AwaitReply(seen, absl::Now() + kWeightsPoll);
    }
    if (!failure.ok()) break;
  }
  // A call that failed because the core's run ended (its queue cancelled, its server gone) is
  // the end of the run, not an error: the heartbeat that says so follows within an interval.
  if (!failure.ok() && beats_->AwaitFinished(absl::Seconds(2))) {
    failure = absl::OkStatus();
    result_.core_finished = true;
  }
  if (failure.ok()) {
    // The episodes still in flight are counted, then dropped; the core hears that the cell
    // leaves rather than wait out the heartbeat timeout (and count it as lost).
    absl::StatusOr<ActorSwitch> last = actor_->Suspend();
    if (last.ok()) result_.episodes_cancelled_at_stop = static_cast<int64_t>(last->episodes.size());
    links_.scheduler->Leave(cell_, -1, /*exit=*/true).IgnoreError();
  }
  Finish();
  const ActorStats stats = actor_->stats();
  result_.episodes_dispatched = tasks_->handed_out();
  result_.episodes_inserted = inserted_.load();
  result_.episodes_failed = stats.episodes_failed;
  result_.tokens_generated = stats.tokens_generated;
  result_.tokens_discarded = stats.tokens_discarded;
  RETURN_IF_ERROR(failure);
  Log(StrCat("stopped (", result_.core_finished ? "the core finished" : "stop request",
             "): ", result_.episodes_inserted, " episodes inserted, ", result_.steps_trained,
             " steps trained (", result_.micro_steps, " micro-steps), ", result_.switches,
             " switches"));
  return result_;
}

void ElasticCell::Finish() {
  stopping_ = true;
  if (actor_ != nullptr) actor_->Stop();
  if (actor_thread_.joinable()) actor_thread_.join();
  if (beats_ != nullptr) beats_->Stop();
}

// ---- `flywheel cell`: a cell as its own process ------------------------------------------------

namespace {

// The core's weights service.
class RemoteWeights final : public WeightsSource {
 public:
  RemoteWeights(std::unique_ptr<WeightsClient> client, ModelOptions model, absl::Duration timeout)
      : client_(std::move(client)), model_(std::move(model)), timeout_(timeout) {}

  absl::StatusOr<std::shared_ptr<const WeightSnapshot>> Newer(int64_t have_version) override {
    if (have_version >= 0) {
      ASSIGN_OR_RETURN(v1::GetVersionResponse version, client_->GetVersion());
      if (version.version() <= have_version) return nullptr;
    }
    ASSIGN_OR_RETURN(FetchedWeights fetched, client_->Fetch(have_version, model_, timeout_));
    return fetched.snapshot;
  }

 private:
  const std::unique_ptr<WeightsClient> client_;
  const ModelOptions model_;
  const absl::Duration timeout_;
};

}  // namespace

absl::StatusOr<ElasticCellResult> RunElasticCell(const JobConfig& config,
                                                 const ElasticCellOptions& options) {
  if (config.run.mode != TrainMode::kElastic) {
    return absl::InvalidArgumentError(
        "flywheel cell takes part in an elastic job: set run.mode = \"elastic\" (the core's "
        "config)");
  }
  SetEmulatedSlowdown(config.run.emulated_slowdown);
  ASSIGN_OR_RETURN(std::unique_ptr<EnvFactory> factory, EnvFactory::Create(config.env));
  EnvExecutor executor(EnvExecutor::OptionsFor(config.env));
  ASSIGN_OR_RETURN(const PolicyText text, MakePolicyText(config, *factory));
  ASSIGN_OR_RETURN(const ModelOptions model,
                   ResolveModelOptions(config, *text.tokenizer, text.tokenizer_name));
  // A cell is one unit of compute: one intra-op thread, as the cells of `flywheel train`.
  torch::set_num_threads(1);
  ASSIGN_OR_RETURN(std::unique_ptr<SchedulerClient> client,
                   SchedulerClient::Connect(options.scheduler_address, options.security));
  ASSIGN_OR_RETURN(std::unique_ptr<RemoteBuffer> buffer,
                   RemoteBuffer::Connect(options.buffer_address, options.security));
  std::atomic<bool> stopping{false};
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  CellLinks links;
  links.scheduler = client.get();
  links.name = StrCat(host, ":", getpid());
  links.connect_store =
      [&](const v1::RegisterResponse& r) -> absl::StatusOr<c10::intrusive_ptr<c10d::Store>> {
    std::string store_host;
    int store_port = 0;
    RETURN_IF_ERROR(ParseHostPort(r.store_address(), &store_host, &store_port, "store address"));
    return dist::ConnectStore(
        store_host, store_port,
        std::chrono::milliseconds(absl::ToInt64Milliseconds(options.connect_timeout)));
  };
  links.connect_weights =
      [&](const v1::RegisterResponse& r) -> absl::StatusOr<std::shared_ptr<WeightsSource>> {
    if (r.weights_address().empty()) {
      return absl::FailedPreconditionError(
          StrCat("the core at ", options.scheduler_address, " serves no weights; cells need them"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<WeightsClient> weights,
                     WeightsClient::Connect(r.weights_address(), options.security));
    return std::make_shared<RemoteWeights>(std::move(weights), model, options.connect_timeout);
  };
  links.insert = [&](Trajectory t) { return buffer->Insert(t, stopping, options.connect_timeout); };
  links.factory = factory.get();
  links.executor = &executor;
  links.text = &text;
  links.model_options = model;
  // A replacement cell's tasks differ from the one it replaces: the start time is in the seed.
  links.seed = static_cast<uint64_t>(config.run.seed) * 1000003u +
               static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) * 2654435761u;
  links.connect_timeout = options.connect_timeout;
  links.log = options.log;
  links.stop = options.stop;
  absl::StatusOr<ElasticCellResult> result;
  {
    ASSIGN_OR_RETURN(std::unique_ptr<ElasticCell> cell, ElasticCell::Create(config, links));
    RETURN_IF_ERROR(WaitForService(
        "buffer", options.buffer_address, options.connect_timeout,
        [&] { return buffer->Info().status(); }, options.stop));
    result = cell->Run();
    stopping = true;
  }
  executor.Close([&] { factory->Interrupt(); });
  return result;
}

std::string ElasticModelHash(const ModelOptions& m) {
  // The architecture: a cell whose replica has another shape cannot take part.
  std::string shape = StrCat(m.vocab_size, "/", m.hidden_size, "/", m.num_layers, "/", m.num_heads,
                             "/", m.num_kv_heads, "/", m.intermediate_size, "/", m.max_seq_len, "/",
                             m.tie_embeddings, "/", m.attention_bias);
  // Qwen3-style shapes (the string of other models is unchanged, so is their digest).
  if (m.head_dim != 0 || m.qk_norm || m.rope_scaling.enabled()) {
    shape += StrCat("/", m.HeadDim(), "/", m.qk_norm, "/", m.rope_scaling.type);
  }
  return TextDigest(shape);
}

}  // namespace flywheel
