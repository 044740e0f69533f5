#include "flywheel/elastic/elastic_cell.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "flywheel/actor/actor.h"
#include "flywheel/core/emulated_device.h"
#include "flywheel/core/host_port.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/dist/membership.h"
#include "flywheel/dist/rendezvous.h"
#include "flywheel/env/env_executor.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/env/task_source.h"
#include "flywheel/learner/streaming_learner.h"
#include "flywheel/model/transformer.h"
#include "flywheel/runtime/learner_group.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/policy_text.h"
#include "flywheel/runtime/remote_buffer.h"
#include "flywheel/runtime/remote_connect.h"
#include "flywheel/runtime/transformer_policy.h"
#include "flywheel/scheduler/remaining_tokens.h"
#include "flywheel/elastic/scheduler_client.h"
#include "flywheel/scheduler/step_group.h"
#include "flywheel/weights/client.h"

namespace flywheel {
namespace {

// The main loop's period while rolling out: how late a role change or a grant is acted on.
constexpr absl::Duration kTick = absl::Milliseconds(5);
// How often a rolling-out cell asks the weights service for a newer version.
constexpr absl::Duration kWeightsPoll = absl::Milliseconds(100);
// One claim's wait for a micro-step: how late a training cell sees that it is to roll out.
constexpr absl::Duration kClaimPoll = absl::Milliseconds(20);
// One wait for the step's participants before the loop rechecks a stop request.
constexpr absl::Duration kReducePoll = absl::Seconds(1);

class ElasticCell {
 public:
  ElasticCell(const JobConfig& config, const ElasticCellOptions& options)
      : config_(config), options_(options) {}
  ~ElasticCell() { Shutdown(); }

  absl::Status Init();
  absl::StatusOr<ElasticCellResult> Run();

 private:
  bool StopRequested() const { return options_.stop != nullptr && options_.stop->load(); }
  void Log(const std::string& line);
  // The latest heartbeat reply; waits out a core that is briefly unreachable.
  absl::StatusOr<v1::HeartbeatResponse> Latest();
  void Report(v1::HeartbeatRequest& request);
  absl::Status Insert(const Trajectory& trajectory);
  // Fetches the newest weights and hands them to the engine (rollout) or returns them.
  absl::StatusOr<std::shared_ptr<const WeightSnapshot>> FetchNewest(int64_t have_version);
  // One tick of the rollout role: weights, admission, the actor's health.
  absl::Status RollOut(const v1::HeartbeatResponse& hb);
  absl::Status StartActor();
  // rollout → train: no new episodes; the in-flight ones finish into the buffer.
  absl::Status StopActor();
  // One learner step in the train role (returns early when the role changes); `current` is the
  // step the latest heartbeat named.
  absl::Status TrainStep(int64_t current);
  void Switched(bool to_train, absl::Time asked, const std::string& detail);
  void Shutdown();

  const JobConfig config_;
  const ElasticCellOptions options_;
  std::unique_ptr<EnvFactory> factory_;
  std::unique_ptr<EnvExecutor> executor_;
  PolicyText text_;  // the tokenizer and turn format the actors borrow
  ModelOptions model_options_;
  std::unique_ptr<SchedulerClient> client_;
  v1::RegisterResponse registration_;
  int cell_ = -1;
  std::unique_ptr<HeartbeatSender> beats_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::unique_ptr<dist::Membership> membership_;
  std::unique_ptr<StepGroup> group_;
  std::unique_ptr<WeightsClient> weights_;
  std::unique_ptr<RemoteBuffer> buffer_;
  Transformer model_{nullptr};
  std::unique_ptr<StreamingLearner> learner_;
  std::unique_ptr<TaskSource> tasks_;
  std::unique_ptr<Actor> actor_;
  std::thread actor_thread_;
  // The token unit's estimate from this cell's finished episodes (heartbeats report it).
  std::unique_ptr<scheduler::RemainingTokens> remaining_;
  absl::Time weights_polled_ = absl::InfinitePast();
  int64_t joinable_after_ = -1;  // a step this cell could not join: wait for a later one

  std::atomic<bool> stopping_{false};
  std::atomic<bool> ready_{false};  // Init made the actor: heartbeats report its counts
  std::atomic<int> role_{v1::CELL_ROLE_ROLLOUT};  // the role the cell is in now
  std::atomic<int64_t> engine_version_{-1};       // the snapshot the engine was given last
  std::atomic<int64_t> admit_until_{0};
  std::atomic<int64_t> inserted_{0};
  absl::Mutex mu_;
  absl::Status actor_status_ ABSL_GUARDED_BY(mu_);
  bool actor_running_ ABSL_GUARDED_BY(mu_) = false;
  ElasticCellResult result_;
};

void ElasticCell::Log(const std::string& line) {
  if (options_.log == nullptr) return;
  std::fprintf(options_.log, "cell %d: %s\n", cell_, line.c_str());
  std::fflush(options_.log);
}

absl::Status ElasticCell::Init() {
  ASSIGN_OR_RETURN(factory_, EnvFactory::Create(config_.env));
  executor_ = std::make_unique<EnvExecutor>(EnvExecutor::OptionsFor(config_.env));
  ASSIGN_OR_RETURN(text_, MakePolicyText(config_, *factory_));
  ASSIGN_OR_RETURN(model_options_,
                   ResolveModelOptions(config_, *text_.tokenizer, text_.tokenizer_name));
  // A cell is one unit of compute: one intra-op thread, as the cells of `flywheel train`.
  torch::set_num_threads(1);

  ASSIGN_OR_RETURN(client_, SchedulerClient::Connect(options_.scheduler_address, options_.security));
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  ASSIGN_OR_RETURN(registration_,
                   client_->Register(JobConfigHash(config_), ElasticModelHash(model_options_),
                                     StrCat(host, ":", getpid()), options_.connect_timeout));
  cell_ = registration_.cell();
  beats_ = std::make_unique<HeartbeatSender>(
      client_.get(), cell_, absl::Milliseconds(registration_.heartbeat_interval_ms()),
      [this](v1::HeartbeatRequest& r) { Report(r); });

  std::string store_host;
  int store_port = 0;
  RETURN_IF_ERROR(
      ParseHostPort(registration_.store_address(), &store_host, &store_port, "store address"));
  const auto timeout =
      std::chrono::milliseconds(absl::ToInt64Milliseconds(options_.connect_timeout));
  ASSIGN_OR_RETURN(store_, dist::ConnectStore(store_host, store_port, timeout));
  dist::MembershipOptions membership;
  membership.group.name = "elastic step group";
  membership.group.timeout = timeout;
  membership.group.threads = 1;
  membership_ = std::make_unique<dist::Membership>(store_, membership);
  group_ = std::make_unique<StepGroup>(membership_.get(), cell_);

  if (registration_.weights_address().empty()) {
    return absl::FailedPreconditionError(
        StrCat("the core at ", options_.scheduler_address, " serves no weights; cells need them"));
  }
  ASSIGN_OR_RETURN(weights_,
                   WeightsClient::Connect(registration_.weights_address(), options_.security));
  std::shared_ptr<const WeightSnapshot> snapshot;
  RETURN_IF_ERROR(WaitForService(
      "weights service", registration_.weights_address(), options_.connect_timeout,
      [&]() -> absl::Status {
        ASSIGN_OR_RETURN(snapshot, FetchNewest(-1));
        if (snapshot == nullptr) return absl::UnavailableError("no weights published yet");
        return absl::OkStatus();
      },
      options_.stop));
  ASSIGN_OR_RETURN(buffer_, RemoteBuffer::Connect(options_.buffer_address, options_.security));
  RETURN_IF_ERROR(WaitForService(
      "buffer", options_.buffer_address, options_.connect_timeout,
      [&] { return buffer_->Info().status(); }, options_.stop));

  ASSIGN_OR_RETURN(model_, MakeInitialModel(model_options_));
  learner_ = std::make_unique<StreamingLearner>(
      config_.learner, config_.run.max_steps, model_->parameters(), TransformerPolicy(model_),
      nullptr, config_.sampling.temperature, 0, RealClock(),
      OptimizerShard::Satellite(static_cast<int>(config_.scheduler.core_cells)));
  // Task streams differ per cell id and per start: a replacement cell does not replay (and
  // collide with) the group ids of the one it replaces.
  const uint64_t incarnation = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  const uint64_t seed = static_cast<uint64_t>(config_.run.seed) * 1000003u +
                        static_cast<uint64_t>(cell_) * 7919u + incarnation * 2654435761u;
  tasks_ = std::make_unique<TaskSource>(factory_->task_name(), seed, config_.actor.group_size);
  remaining_ = std::make_unique<scheduler::RemainingTokens>(
      scheduler::RemainingTokens::kWindow, static_cast<double>(config_.actor.max_new_tokens));
  ASSIGN_OR_RETURN(std::unique_ptr<RolloutEngine> engine,
                   RolloutEngine::Create(config_.actor.engine, snapshot));
  engine_version_ = snapshot->version;
  actor_ = std::make_unique<Actor>(
      StrCat("cell-", cell_, "@", fmt::format("{:x}", incarnation % 0xffffff)), config_.actor,
      config_.sampling, std::move(engine), factory_.get(), executor_.get(), text_.tokenizer.get(),
      tasks_.get(), [this](Trajectory t) { return Insert(t); }, seed + 1, text_.turn_format.get());
  actor_->SetAdmission([this] { return admit_until_.load() - tasks_->handed_out(); });
  ready_ = true;
  Log(StrCat("registered with the core at ", options_.scheduler_address, " (store ",
             registration_.store_address(), ", weights ", registration_.weights_address(),
             "), weights version ", snapshot->version));
  return absl::OkStatus();
}

void ElasticCell::Report(v1::HeartbeatRequest& request) {
  request.set_role(static_cast<v1::CellRole>(role_.load()));
  if (!ready_.load()) return;  // still starting: nothing started, nothing finished
  // Finished first: every episode counted finished was started before it was read.
  request.set_finished(inserted_.load() + actor_->stats().episodes_failed);
  request.set_dispatched(tasks_->handed_out());
  request.set_weights_version(engine_version_.load());
  request.set_remaining_tokens(remaining_->Remaining(actor_->InFlightPolicyTokens()));
}

absl::Status ElasticCell::Insert(const Trajectory& trajectory) {
  remaining_->Observe(trajectory.NumTrainable());
  RETURN_IF_ERROR(buffer_->Insert(trajectory, stopping_, options_.connect_timeout));
  inserted_.fetch_add(1);
  return absl::OkStatus();
}

absl::StatusOr<v1::HeartbeatResponse> ElasticCell::Latest() {
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  while (true) {
    absl::StatusOr<v1::HeartbeatResponse> hb = beats_->latest();
    if (hb.ok() || !IsTransient(hb.status())) return hb;
    if (StopRequested()) return absl::CancelledError("stop requested");
    if (absl::Now() > deadline) {
      return absl::UnavailableError(StrCat("lost the core at ", options_.scheduler_address, " for ",
                                           absl::ToDoubleSeconds(options_.connect_timeout),
                                           " s: ", hb.status().message()));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::StatusOr<std::shared_ptr<const WeightSnapshot>> ElasticCell::FetchNewest(
    int64_t have_version) {
  ASSIGN_OR_RETURN(FetchedWeights fetched,
                   weights_->Fetch(have_version, model_options_, options_.connect_timeout));
  return fetched.snapshot;
}

absl::Status ElasticCell::StartActor() {
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(actor_status_);
    actor_running_ = true;
  }
  actor_thread_ = std::thread([this] {
    torch::set_num_threads(1);
    // Returns when StopActor drains it, or at Stop.
    const absl::Status s = actor_->Run(-1);
    absl::MutexLock lock(&mu_);
    if (!s.ok() && actor_status_.ok() && !stopping_.load()) actor_status_ = s;
    actor_running_ = false;
  });
  // A Drain served before Run begins would not end that Run: wait until it runs.
  while (!actor_->running()) {
    {
      absl::MutexLock lock(&mu_);
      if (!actor_running_) break;  // Run already returned (an error, or a stop)
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  return absl::OkStatus();
}

absl::Status ElasticCell::StopActor() {
  absl::StatusOr<ActorSwitch> drained = actor_->Drain();
  if (actor_thread_.joinable()) actor_thread_.join();
  RETURN_IF_ERROR(drained.status());
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
  if (absl::Now() - weights_polled_ >= kWeightsPoll) {
    weights_polled_ = absl::Now();
    absl::StatusOr<v1::GetVersionResponse> version = weights_->GetVersion();
    if (version.ok() && version->version() > engine_version_.load()) {
      absl::StatusOr<std::shared_ptr<const WeightSnapshot>> newer =
          FetchNewest(engine_version_.load());
      if (newer.ok() && *newer != nullptr) {
        actor_->PublishSnapshot(*newer);
        engine_version_ = (*newer)->version;
      } else if (!newer.ok() && !IsTransient(newer.status())) {
        return newer.status();
      }
    } else if (!version.ok() && !IsTransient(version.status())) {
      return version.status();
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
  // The step after the last one this cell was in, without waiting for a heartbeat to name it:
  // Join waits for it to begin, so the cell is there for its first micro-steps.
  const int64_t step = std::max(current, joinable_after_ + 1);
  absl::StatusOr<v1::JoinResponse> joined = client_->Join(cell_, step, absl::Now() + kReducePoll);
  spdlog::debug("cell {}: join step {} (heartbeat step {}): {}", cell_, step, current,
                joined.ok() ? StrCat("version ", joined->version()) : joined.status().ToString());
  if (absl::IsDeadlineExceeded(joined.status())) return absl::OkStatus();  // look at the role again
  if (absl::IsFailedPrecondition(joined.status()) || absl::IsAborted(joined.status())) {
    // The step completed (or the core moved on) before this cell joined, or the cell was
    // declared dead in it: the next one.
    joinable_after_ = step;
    beats_->Poke();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(joined.status());
  if (learner_->version() != joined->version()) {
    ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> snapshot, FetchNewest(-1));
    if (snapshot == nullptr || snapshot->version != joined->version()) {
      // The core published the step's result already: this step is over for this cell.
      RETURN_IF_ERROR(client_->Leave(cell_, step, /*exit=*/false).status());
      joinable_after_ = step;
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(learner_->LoadWeights(snapshot->model->parameters(), joined->version(),
                                          joined->optimizer_step()));
  }
  while (true) {
    ASSIGN_OR_RETURN(v1::HeartbeatResponse hb, Latest());
    if (StopRequested() || hb.finished() || hb.role() != v1::CELL_ROLE_TRAIN) {
      if (learner_->cell_micro_steps() > 0) break;  // reduce what it ran
      // Nothing of the step ran here: give the claims back and leave at once.
      learner_->AbandonStep();
      absl::StatusOr<int64_t> left = client_->Leave(cell_, step, /*exit=*/false);
      // kFailedPrecondition: the step completed meanwhile with this cell as a participant.
      if (left.ok() || !absl::IsFailedPrecondition(left.status())) return left.status();
      break;
    }
    absl::StatusOr<std::shared_ptr<const MicroStep>> ms =
        client_->Claim(cell_, step, absl::Now() + kClaimPoll);
    if (absl::IsDeadlineExceeded(ms.status())) continue;
    RETURN_IF_ERROR(ms.status());
    if (*ms == nullptr) break;  // the step is complete
    RETURN_IF_ERROR(learner_->RunMicroStep(**ms));
    RETURN_IF_ERROR(client_->Done(cell_, step, (*ms)->id));
    ++result_.micro_steps;
  }
  StepParticipants participants;
  while (true) {
    absl::StatusOr<StepParticipants> p =
        client_->AwaitParticipants(cell_, step, absl::Now() + kReducePoll);
    if (absl::IsDeadlineExceeded(p.status()) && !StopRequested()) continue;
    RETURN_IF_ERROR(p.status());
    participants = *std::move(p);
    break;
  }
  spdlog::debug("cell {}: step {}: {} micro-steps here, reducing with {} participants", cell_, step,
                learner_->cell_micro_steps(), participants.cells.size());
  ASSIGN_OR_RETURN(dist::Communicator * comm, group_->For(participants));
  absl::StatusOr<StreamingStepResult> result = learner_->FinishStep(comm, participants.normaliser);
  if (!result.ok() && !absl::IsUnavailable(result.status())) return result.status();
  ++result_.steps_trained;
  joinable_after_ = step;
  return absl::OkStatus();
}

absl::StatusOr<ElasticCellResult> ElasticCell::Run() {
  result_.cell = cell_;
  RETURN_IF_ERROR(StartActor());
  absl::Status failure;
  while (!StopRequested()) {
    if (beats_->AwaitFinished(absl::ZeroDuration())) {
      result_.core_finished = true;
      break;
    }
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
        failure = StopActor();
        if (!failure.ok()) break;
        Switched(true, asked, " (in-flight episodes finished in place)");
      }
      failure = TrainStep(hb->step());
    } else {
      if (in_train) {
        const absl::Time asked = absl::Now();
        absl::StatusOr<std::shared_ptr<const WeightSnapshot>> newest = FetchNewest(-1);
        if (!newest.ok()) {
          failure = newest.status();
          break;
        }
        actor_->PublishSnapshot(*newest);
        engine_version_ = (*newest)->version;
        failure = StartActor();
        if (!failure.ok()) break;
        Switched(false, asked, StrCat(", weights version ", (*newest)->version));
      }
      failure = RollOut(*hb);
      absl::SleepFor(kTick);
    }
    if (!failure.ok()) break;
  }
  // A call that failed because the core's run ended (its queue cancelled, its server gone) is
  // the end of the run, not an error: the heartbeat that says so follows within an interval.
  if (!failure.ok() && beats_->AwaitFinished(absl::Seconds(2))) {
    failure = absl::OkStatus();
    result_.core_finished = true;
  }
  const ActorStats stats = actor_->stats();
  result_.episodes_inserted = inserted_.load();
  result_.episodes_failed = stats.episodes_failed;
  if (failure.ok()) {
    // A stop request or the end of the run: say so rather than let the core wait out the
    // heartbeat timeout (and count the cell as lost).
    stopping_ = true;
    actor_->Stop();
    if (actor_thread_.joinable()) actor_thread_.join();
    client_->Leave(cell_, -1, /*exit=*/true).IgnoreError();
  }
  Shutdown();
  RETURN_IF_ERROR(failure);
  Log(StrCat("stopped (", result_.core_finished ? "the core finished" : "stop request",
             "): ", result_.episodes_inserted, " episodes inserted, ", result_.steps_trained,
             " steps trained (", result_.micro_steps, " micro-steps), ", result_.switches,
             " switches"));
  return result_;
}

void ElasticCell::Shutdown() {
  stopping_ = true;
  if (actor_ != nullptr) actor_->Stop();
  if (actor_thread_.joinable()) actor_thread_.join();
  if (beats_ != nullptr) beats_->Stop();
  if (executor_ != nullptr) executor_->Close([this] { factory_->Interrupt(); });
}

}  // namespace

std::string ElasticModelHash(const ModelOptions& m) {
  // The architecture: a cell whose replica has another shape cannot take part.
  std::string shape = StrCat(m.vocab_size, "/", m.hidden_size, "/", m.num_layers, "/", m.num_heads,
                             "/", m.num_kv_heads, "/", m.intermediate_size, "/", m.max_seq_len,
                             "/", m.tie_embeddings, "/", m.attention_bias);
  // Qwen3-style shapes (the string of other models is unchanged, so is their digest).
  if (m.head_dim != 0 || m.qk_norm || m.rope_scaling.enabled()) {
    shape += StrCat("/", m.HeadDim(), "/", m.qk_norm, "/", m.rope_scaling.type);
  }
  return TextDigest(shape);
}

absl::StatusOr<ElasticCellResult> RunElasticCell(const JobConfig& config,
                                                 const ElasticCellOptions& options) {
  if (config.run.mode != TrainMode::kElastic) {
    return absl::InvalidArgumentError(
        "flywheel cell takes part in an elastic job: set run.mode = \"elastic\" (the core's "
        "config)");
  }
  SetEmulatedSlowdown(config.run.emulated_slowdown);
  ElasticCell cell(config, options);
  RETURN_IF_ERROR(cell.Init());
  return cell.Run();
}

}  // namespace flywheel
