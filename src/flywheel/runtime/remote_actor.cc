#include "flywheel/runtime/remote_actor.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "flywheel/actor/actor.h"
#include "flywheel/actor/actor_threads.h"
#include "flywheel/actor/env_tokenizer.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/core/trajectory_proto.h"
#include "flywheel/env/env_executor.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/env/task_source.h"
#include "flywheel/runtime/blas_choice.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/remote_buffer.h"
#include "flywheel/runtime/remote_connect.h"
#include "flywheel/weights/client.h"

namespace flywheel {
namespace {

class RemoteActorProcess {
 public:
  RemoteActorProcess(const JobConfig& config, const RemoteActorOptions& options)
      : config_(config), options_(options) {}
  ~RemoteActorProcess() {
    StopActors();
    if (ack_log_ != nullptr) std::fclose(ack_log_);
  }

  absl::Status Init();
  absl::StatusOr<RemoteActorResult> Run();

 private:
  bool StopRequested() const { return options_.stop != nullptr && options_.stop->load(); }
  absl::Status Insert(const Trajectory& trajectory);
  // Fetches weights newer than the engines' and hands them to every actor.
  absl::Status FetchNewer(int64_t have_version);
  void Log(const std::string& line);
  void StopActors();

  const JobConfig config_;
  const RemoteActorOptions options_;
  std::string name_;
  std::unique_ptr<EnvFactory> factory_;
  std::unique_ptr<EnvExecutor> executor_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ModelOptions model_options_;
  std::unique_ptr<WeightsClient> weights_;
  std::unique_ptr<RemoteBuffer> buffer_;
  std::shared_ptr<const WeightSnapshot> snapshot_;
  std::vector<std::unique_ptr<TaskSource>> tasks_;
  std::vector<std::unique_ptr<Actor>> actors_;
  ActorThreads actor_threads_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> inserted_{0};
  int64_t weight_updates_ = 0;
  absl::Mutex ack_log_mu_;
  std::FILE* ack_log_ ABSL_GUARDED_BY(ack_log_mu_) = nullptr;  // --ack-log
};

void RemoteActorProcess::Log(const std::string& line) {
  if (options_.log == nullptr) return;
  std::fprintf(options_.log, "%s\n", line.c_str());
  std::fflush(options_.log);
}

absl::Status RemoteActorProcess::FetchNewer(int64_t have_version) {
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(FetchedWeights fetched, weights_->Fetch(have_version, model_options_));
  if (fetched.snapshot == nullptr) return absl::OkStatus();
  const double ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  snapshot_ = fetched.snapshot;
  for (const auto& actor : actors_) actor->PublishSnapshot(snapshot_);
  if (have_version >= 0) ++weight_updates_;
  Log(StrCat(name_, ": weights version ", snapshot_->version, " (", fetched.bytes, " bytes in ",
             fetched.chunks, " chunks, ", fmt::format("{:.1f}", ms), " ms)"));
  return absl::OkStatus();
}

absl::Status RemoteActorProcess::Init() {
  name_ = StrCat("actor-", options_.actor_index);
  if (!options_.ack_log.empty()) {
    absl::MutexLock lock(&ack_log_mu_);
    ack_log_ = std::fopen(options_.ack_log.c_str(), "a");
    if (ack_log_ == nullptr) {
      return absl::InvalidArgumentError(
          StrCat("--ack-log ", options_.ack_log, ": cannot open: ", std::strerror(errno)));
    }
  }
  ASSIGN_OR_RETURN(factory_, EnvFactory::Create(config_.env));
  executor_ = std::make_unique<EnvExecutor>(EnvExecutor::OptionsFor(config_.env));
  ASSIGN_OR_RETURN(tokenizer_, MakeTokenizer(factory_->vocabulary()));
  ASSIGN_OR_RETURN(model_options_,
                   ResolveModelOptions(config_, *tokenizer_, factory_->task_name()));
  ASSIGN_OR_RETURN(const BlasChoice blas,
                   ChooseBlasThreads(BlasRole::kActorProcess, config_.run.blas_threads,
                                     model_options_, config_.learner.token_budget));
  spdlog::info("{}: {}", name_, blas.DebugString());

  // The newest weights first: a restarted or late actor never generates with stale ones.
  ASSIGN_OR_RETURN(weights_, WeightsClient::Connect(options_.weights_address, options_.security));
  RETURN_IF_ERROR(WaitForService(
      "weights service", options_.weights_address, options_.connect_timeout,
      [&]() -> absl::Status {
        ASSIGN_OR_RETURN(v1::GetVersionResponse version, weights_->GetVersion());
        if (version.finished()) {
          return absl::FailedPreconditionError(
              StrCat("the learner at ", options_.weights_address, " has finished its run"));
        }
        if (version.version() < 0) return absl::UnavailableError("no weights published yet");
        return FetchNewer(-1);
      },
      options_.stop));

  ASSIGN_OR_RETURN(buffer_, RemoteBuffer::Connect(options_.buffer_address, options_.security));
  RETURN_IF_ERROR(WaitForService(
      "buffer", options_.buffer_address, options_.connect_timeout,
      [&] { return buffer_->Info().status(); }, options_.stop));

  // Task streams differ per actor index, per thread and per start, so that a restarted actor
  // does not replay (and collide with) the group ids of the process it replaces.
  const uint64_t incarnation = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  for (int64_t j = 0; j < config_.actor.num_actors; ++j) {
    const uint64_t seed = static_cast<uint64_t>(config_.run.seed) * 1000003u +
                          static_cast<uint64_t>(options_.actor_index) * 7919u + j * 104729u +
                          incarnation * 2654435761u;
    tasks_.push_back(
        std::make_unique<TaskSource>(factory_->task_name(), seed, config_.actor.group_size));
    ASSIGN_OR_RETURN(std::unique_ptr<RolloutEngine> engine,
                     RolloutEngine::Create(config_.actor.engine, snapshot_));
    // Trajectory ids start with the actor id, so the id carries the incarnation too.
    std::string id = config_.actor.num_actors == 1 ? name_ : StrCat(name_, ".", j);
    id = StrCat(id, "@", fmt::format("{:x}", incarnation % 0xffffff));
    actors_.push_back(std::make_unique<Actor>(
        std::move(id), config_.actor, config_.sampling, std::move(engine), factory_.get(),
        executor_.get(), tokenizer_.get(), tasks_.back().get(),
        [this](Trajectory t) { return Insert(t); }, seed + 1));
  }
  return absl::OkStatus();
}

absl::Status RemoteActorProcess::Insert(const Trajectory& trajectory) {
  RETURN_IF_ERROR(buffer_->Insert(trajectory, stopping_, options_.connect_timeout));
  inserted_.fetch_add(1);
  absl::MutexLock lock(&ack_log_mu_);
  if (ack_log_ != nullptr) {
    // One write per line, flushed: a SIGKILL leaves whole lines (the page cache keeps them).
    const std::string line = StrCat(absl::ToUnixMillis(absl::Now()), " ", trajectory.id, "\n");
    if (std::fwrite(line.data(), 1, line.size(), ack_log_) != line.size() ||
        std::fflush(ack_log_) != 0) {
      return absl::InternalError(StrCat("--ack-log ", options_.ack_log, ": cannot append"));
    }
  }
  return absl::OkStatus();
}

void RemoteActorProcess::StopActors() {
  stopping_.store(true);
  actor_threads_.Stop();
  // A hung environment process must not hold the stop: calls still running are interrupted.
  if (executor_ != nullptr) executor_->Close([this] { factory_->Interrupt(); });
}

absl::StatusOr<RemoteActorResult> RemoteActorProcess::Run() {
  actor_threads_.Start(actors_);
  RemoteActorResult result;
  absl::Status failure = absl::OkStatus();
  absl::Time weights_last_ok = absl::Now();
  while (!StopRequested()) {
    if (failure = actor_threads_.FirstError(); !failure.ok()) break;
    absl::StatusOr<v1::GetVersionResponse> version = weights_->GetVersion();
    if (version.ok()) {
      weights_last_ok = absl::Now();
      if (version->finished()) {
        result.learner_finished = true;
        break;
      }
      if (version->version() != snapshot_->version) {
        // An older version: the learner resumed from a checkpoint before the weights this actor
        // has, which were rolled back with it; its weights replace them.
        const bool rolled_back = version->version() < snapshot_->version;
        if (absl::Status s = FetchNewer(rolled_back ? -1 : snapshot_->version); !s.ok()) {
          // Nothing was applied; the next poll tries again.
          if (!IsTransient(s) && !absl::IsDataLoss(s)) {
            failure = s;
            break;
          }
          spdlog::warn("{}: {}", name_, s.message());
        }
      }
    } else if (!IsTransient(version.status())) {
      failure = version.status();
      break;
    } else if (absl::Now() - weights_last_ok > options_.connect_timeout) {
      failure = absl::UnavailableError(StrCat(
          "lost the weights service at ", options_.weights_address, " for ",
          absl::ToDoubleSeconds(options_.connect_timeout), " s: ", version.status().message()));
      break;
    }
    absl::SleepFor(options_.poll_interval);
  }
  StopActors();
  RETURN_IF_ERROR(failure);
  for (const auto& actor : actors_) result.episodes_finished += actor->stats().episodes_finished;
  result.inserted = inserted_.load();
  result.weight_updates = weight_updates_;
  result.final_version = snapshot_->version;
  Log(StrCat(name_, ": stopped (", result.learner_finished ? "the learner finished" : "signal",
             "), ", result.episodes_finished, " episodes, ", result.inserted, " inserted, ",
             result.weight_updates, " weight updates, last version ", result.final_version));
  return result;
}

}  // namespace

absl::StatusOr<RemoteActorResult> RunRemoteActor(const JobConfig& config,
                                                 const RemoteActorOptions& options) {
  RemoteActorProcess process(config, options);
  RETURN_IF_ERROR(process.Init());
  return process.Run();
}

}  // namespace flywheel
