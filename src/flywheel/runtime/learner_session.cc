#include "flywheel/runtime/learner_session.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/core/trajectory_proto.h"
#include "flywheel/dist/collectives.h"
#include "flywheel/learner/sharded_checkpoint.h"
#include "flywheel/learner/trainer_state.h"
#include "flywheel/model/safetensors.h"
#include "flywheel/model/torch_status.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/transformer_policy.h"

namespace flywheel {
namespace {


// A command of rank 0 to the other ranks: one byte, then (kStep) per trajectory its serialized
// v1::Trajectory preceded by its length (8 bytes, host order: the ranks run the same binary).
std::string EncodeBatch(char command, const std::vector<Trajectory>* batch) {
  std::string bytes(1, command);
  if (batch != nullptr) {
    for (const Trajectory& t : *batch) {
      const std::string serialized = ToProto(t).SerializeAsString();
      const uint64_t length = serialized.size();
      bytes.append(reinterpret_cast<const char*>(&length), sizeof(length));
      bytes += serialized;
    }
  }
  return bytes;
}

absl::StatusOr<std::vector<Trajectory>> DecodeBatch(const std::string& bytes) {
  std::vector<Trajectory> batch;
  size_t at = 1;
  while (at < bytes.size()) {
    uint64_t length = 0;
    if (bytes.size() - at < sizeof(length)) {
      return absl::DataLossError("learner group: the batch from rank 0 is truncated");
    }
    std::memcpy(&length, bytes.data() + at, sizeof(length));
    at += sizeof(length);
    v1::Trajectory proto;
    if (bytes.size() - at < length ||
        !proto.ParseFromArray(bytes.data() + at, static_cast<int>(length))) {
      return absl::DataLossError("learner group: a trajectory from rank 0 does not parse");
    }
    at += length;
    ASSIGN_OR_RETURN(Trajectory t, FromProto(proto));
    batch.push_back(std::move(t));
  }
  return batch;
}

std::vector<ShardUnit> UnitsOf(const Transformer& model) {
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters()) names.push_back(item.key());
  return TransformerUnits(names);
}

// learner.kl_coef > 0: the reference model's weights, beside the checkpoints, so that --resume
// keeps the reference the run started from rather than taking the restored policy.
constexpr const char* kReferenceModelFile = "reference.safetensors";

}  // namespace

nlohmann::json TrainedStep::MetricsLine(int64_t version, double elapsed_seconds) const {
  nlohmann::json line = {
      {"step", result.optimizer.step},
      {"version", version},
      {"elapsed_s", elapsed_seconds},
      {"reward_mean", reward_mean},
      {"success_rate", success_rate},
      {"trajectories", trajectories},
      {"loss", result.loss},
      {"lr", result.optimizer.lr},
      {"grad_norm", result.optimizer.grad_norm},
      {"mean_ratio", result.diagnostics.mean_ratio()},
      {"mean_is_weight", result.diagnostics.mean_is_weight()},
      {"clip_fraction", result.diagnostics.clip_fraction()},
      {"trainable_tokens", result.diagnostics.tokens},
      {"learner_busy_s", result.times.compute()},
      {"learner_wait_s", wait_seconds},
      {"lag_mean", lag_mean},
      {"lag_max", lag_max},
      {"lag_counts", LagCountsJson(result.staleness.lag_counts)},
  };
  if (kl.has_value()) line["kl"] = *kl;
  if (entropy.has_value()) line["entropy"] = *entropy;
  return line;
}

absl::StatusOr<std::unique_ptr<LearnerSession>> LearnerSession::Open(
    const JobConfig& config, const ModelOptions& model_options, bool resume,
    dist::Communicator* group) {
  std::unique_ptr<LearnerSession> s(new LearnerSession(config));
  torch::manual_seed(static_cast<uint64_t>(config.run.seed));
  ASSIGN_OR_RETURN(s->model_, MakeInitialModel(model_options));
  if (group == nullptr && config.learner.sharding != ShardingMode::kNone) {
    // Sharding needs a communicator even alone (e.g. a sharded run resumed on one rank).
    dist::CommunicatorOptions options;
    options.name = "learner (one rank)";
    ASSIGN_OR_RETURN(s->owned_group_,
                     dist::Communicator::Create(c10::make_intrusive<c10d::HashStore>(), 0, 1,
                                                options));
    group = s->owned_group_.get();
  }
  std::string latest;
  RETURN_IF_ERROR(s->OpenGroup(group, resume));
  if (resume) {
    // Rank 0 picks the checkpoint, so that every rank restores the same one.
    absl::Status listed;
    if (s->run_dir_ != nullptr) {
      absl::StatusOr<std::optional<std::string>> found = s->checkpoints_->Latest();
      if (!found.ok()) listed = found.status();
      if (found.ok() && found->has_value()) latest = **found;
    }
    if (group != nullptr && group->size() > 1) {
      RETURN_IF_ERROR(dist::BroadcastBytes(*group, latest, 0));
    }
    RETURN_IF_ERROR(listed);
    if (latest.empty()) {
      return absl::NotFoundError(
          StrCat("--resume: no complete checkpoint in ", s->checkpoints_->options().directory));
    }
  }
  Transformer model = s->model_;
  PolicyForward forward = TransformerPolicy(model);
  ParallelContext parallel;
  // Per-layer units even on one rank without sharding: a sharded checkpoint restores by unit.
  // (They shape nothing else there.)
  parallel.units = UnitsOf(s->model_);
  if (group != nullptr) {
    parallel.communicator = group;
    if (config.learner.sharding == ShardingMode::kFull) parallel.transformer = s->model_.get();
  }
  absl::Status restored;
  if (!latest.empty()) {
    restored = s->Restore(latest, std::move(parallel), std::move(forward));
  } else {
    s->learner_ = std::make_unique<LearnerStep>(config.learner, config.run.max_steps,
                                                s->model_->parameters(), std::move(forward),
                                                nullptr, config.sampling.temperature,
                                                RealClock(), 0, std::move(parallel));
  }
  if (group != nullptr && group->size() > 1) {
    // A rank that failed to restore must not leave the others waiting for its first step.
    absl::Status agreed = dist::AgreeOk(*group, restored.ok());
    RETURN_IF_ERROR(restored);
    RETURN_IF_ERROR(agreed);
  }
  RETURN_IF_ERROR(restored);
  s->restored_from_ = latest;
  s->last_checkpoint_step_ = s->step();
  s->opened_ = true;
  return s;
}

absl::Status LearnerSession::OpenGroup(dist::Communicator* group, bool resume) {
  group_ = group;
  const int rank = group != nullptr ? group->rank() : 0;
  const std::filesystem::path checkpoints =
      std::filesystem::path(config_.run.runs_dir) / config_.run.name / "checkpoints";
  checkpoints_ = std::make_unique<CheckpointManager>(
      CheckpointOptions{checkpoints.string(), config_.learner.keep_last});
  absl::Status opened;
  if (rank == 0) {
    absl::StatusOr<std::unique_ptr<RunDirectory>> dir = RunDirectory::Open(
        config_.run.runs_dir, config_.run.name, FormatJobConfig(config_), resume);
    if (dir.ok()) run_dir_ = *std::move(dir);
    opened = dir.status();
  }
  if (group == nullptr || group->size() == 1) return opened;
  // The others must not go on (and write shards into a directory that is not there) alone.
  absl::Status agreed = dist::AgreeOk(*group, opened.ok());
  return opened.ok() ? agreed : opened;
}
absl::Status LearnerSession::Restore(const std::string& checkpoint, ParallelContext parallel,
                                     PolicyForward forward) {
  const LearnerOptions& options = config_.learner;
  auto make_learner = [&](const LearnerOptions& o, ParallelContext p, PolicyForward f) {
    return std::make_unique<LearnerStep>(o, config_.run.max_steps, model_->parameters(),
                                         std::move(f), nullptr, config_.sampling.temperature,
                                         RealClock(), 0, std::move(p));
  };
  if (std::filesystem::exists(std::filesystem::path(checkpoint) / kShardManifestFile)) {
    // Sharded (any N, any mode): every rank reads the whole units and keeps its slice.
    learner_ = make_learner(options, std::move(parallel), std::move(forward));
    return LoadShardedCheckpoint(checkpoint, *learner_);
  }
  // A full checkpoint (sharding = "none", any N): the whole model and optimiser state.
  RETURN_IF_ERROR(LoadStateDict(StrCat(checkpoint, "/", kCheckpointModelFile), *model_));
  if (options.sharding == ShardingMode::kNone) {
    learner_ = make_learner(options, std::move(parallel), std::move(forward));
    return ReadTrainerState(checkpoint, learner_->optimizer());
  }
  // Into a sharded run: read the state into a replicated learner over the same units, export
  // it as whole units and let the sharded learner take its slice (as from a sharded checkpoint).
  TrainerShard whole;
  {
    LearnerOptions replicated = options;
    replicated.sharding = ShardingMode::kNone;
    ParallelContext units_only;
    units_only.units = parallel.units;
    std::unique_ptr<LearnerStep> reader = make_learner(replicated, std::move(units_only), forward);
    RETURN_IF_ERROR(ReadTrainerState(checkpoint, reader->optimizer()));
    ASSIGN_OR_RETURN(whole, reader->ExportShard());
  }
  learner_ = make_learner(options, std::move(parallel), std::move(forward));
  return learner_->ImportState(whole);
}

LearnerSession::~LearnerSession() {
  if (opened_ && leads() && !finished_) {
    // Rank 0 failed (or returned early): the others are waiting in Follow for a command.
    if (absl::Status s = Broadcast(Command::kAbort, nullptr); !s.ok()) {
      spdlog::warn("learner group: telling the other ranks to stop: {}", s.message());
    }
  }
}

absl::Status LearnerSession::Broadcast(Command command, const std::vector<Trajectory>* batch) {
  std::string bytes = EncodeBatch(static_cast<char>(command), batch);
  return dist::BroadcastBytes(*group_, bytes, 0);
}

absl::Status LearnerSession::Finish() {
  if (!leads() || finished_) return absl::OkStatus();
  finished_ = true;
  RETURN_IF_ERROR(Broadcast(Command::kEnd, nullptr));
  // A send to a rank that died may still complete locally: the agreement needs every rank.
  return dist::AgreeOk(*group_, true);
}

absl::Status LearnerSession::Follow() {
  if (group_ == nullptr || group_->rank() == 0) {
    return absl::FailedPreconditionError("LearnerSession::Follow is for ranks > 0 of a group");
  }
  while (true) {
    std::string bytes;
    RETURN_IF_ERROR(dist::BroadcastBytes(*group_, bytes, 0));
    if (bytes.empty()) return absl::DataLossError("learner group: an empty command from rank 0");
    switch (static_cast<Command>(bytes[0])) {
      case Command::kStep: {
        ASSIGN_OR_RETURN(std::vector<Trajectory> batch, DecodeBatch(bytes));
        absl::StatusOr<TrainedStep> trained = Train(std::move(batch), absl::ZeroDuration());
        // All of it too stale: rank 0 saw the same and fetches more.
        if (!trained.ok() && !absl::IsUnavailable(trained.status())) return trained.status();
        break;
      }
      case Command::kSnapshot:
        RETURN_IF_ERROR(learner_->FullParameters().status());
        break;
      case Command::kCheckpoint:
        RETURN_IF_ERROR(SaveCheckpoint(step()));
        break;
      case Command::kEnd:
        return dist::AgreeOk(*group_, true);
      case Command::kAbort:
        return absl::AbortedError(StrCat("rank ", group_->rank(), ": rank 0 stopped with an error"));
      default:
        return absl::DataLossError(
            StrCat("learner group: unknown command ", static_cast<int>(bytes[0]), " from rank 0"));
    }
  }
}

absl::StatusOr<TrainedStep> LearnerSession::Step(std::vector<Trajectory> batch,
                                                 absl::Duration waited) {
  if (leads()) RETURN_IF_ERROR(Broadcast(Command::kStep, &batch));
  return Train(std::move(batch), waited);
}

absl::StatusOr<TrainedStep> LearnerSession::Train(std::vector<Trajectory> batch,
                                                  absl::Duration waited) {
  TrainedStep out;
  out.trajectories = static_cast<int64_t>(batch.size());
  out.wait_seconds = absl::ToDoubleSeconds(waited);
  learner_->tracker().Add(Phase::kWaitData, waited);
  wait_seconds_ += out.wait_seconds;
  double reward_sum = 0;
  int64_t successes = 0;
  for (const Trajectory& t : batch) {
    reward_sum += t.final_reward;
    successes += t.final_reward >= config_.run.success_reward;
  }
  if (out.trajectories > 0) {
    out.reward_mean = reward_sum / static_cast<double>(out.trajectories);
    out.success_rate = static_cast<double>(successes) / static_cast<double>(out.trajectories);
  }
  if (config_.learner.kl_coef > 0 && !reference_) RETURN_IF_ERROR(FreezeReference());
  ASSIGN_OR_RETURN(out.result, learner_->Step(std::move(batch)));
  out.disposition = learner_->last_disposition();
  if (config_.learner.kl_coef > 0) out.kl = out.result.diagnostics.kl;
  if (config_.learner.entropy_coef > 0) out.entropy = out.result.diagnostics.entropy;
  busy_seconds_ += out.result.times.compute();
  const LagSummary lags = SummariseLags(out.result.staleness.lag_counts);
  out.lag_mean = lags.mean;
  out.lag_max = lags.max;
  if (hooks_.trained) RETURN_IF_ERROR(hooks_.trained(out));
  const int64_t step = out.result.optimizer.step;
  if (config_.learner.checkpoint_every > 0 && step % config_.learner.checkpoint_every == 0) {
    RETURN_IF_ERROR(SaveCheckpoint(step));
    out.checkpointed = true;
  }
  return out;
}

absl::Status LearnerSession::FreezeReference() {
  // Whole parameters on every rank (gathered when fully sharded): the reference is a replica.
  ASSIGN_OR_RETURN(std::vector<torch::Tensor> weights, learner_->FullParameters());
  ASSIGN_OR_RETURN(Transformer reference, FrozenCopy(model_->options(), std::move(weights)));
  absl::Status kept;  // rank 0: the reference read from, or written to, the run directory
  if (run_dir_ != nullptr) {
    const std::filesystem::path path = run_dir_->path() / kReferenceModelFile;
    if (std::filesystem::exists(path)) {
      kept = LoadStateDict(path.string(), *reference);
      if (kept.ok()) spdlog::info("learner.kl_coef: the reference model is {}", path.string());
    } else {
      if (!restored_from_.empty()) {
        spdlog::warn("learner.kl_coef: {} has no {}: the reference model is the restored policy",
                     run_dir_->path().string(), kReferenceModelFile);
      }
      kept = SaveStateDict(path.string(), *reference);  // atomically, as every safetensors file
    }
    kept = Annotate(kept, "learner.kl_coef: the reference model");
  }
  if (group_ != nullptr && group_->size() > 1) {
    absl::Status agreed = dist::AgreeOk(*group_, kept.ok());
    RETURN_IF_ERROR(kept);
    RETURN_IF_ERROR(agreed);
    // Rank 0's: the others may not see the run directory (a resumed run's reference is there).
    for (torch::Tensor& p : reference->parameters()) RETURN_IF_ERROR(group_->Broadcast(p, 0));
  }
  RETURN_IF_ERROR(kept);
  learner_->SetReference(TransformerPolicy(reference));
  reference_ = std::move(reference);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const WeightSnapshot>> LearnerSession::Snapshot() {
  if (config_.learner.sharding != ShardingMode::kFull) {
    return MakeSnapshot(model_, learner_->version());
  }
  // Fully sharded, the model holds no weights between steps: every rank gathers them.
  if (leads()) RETURN_IF_ERROR(Broadcast(Command::kSnapshot, nullptr));
  ASSIGN_OR_RETURN(std::vector<torch::Tensor> full, learner_->FullParameters());
  ASSIGN_OR_RETURN(Transformer whole, FrozenCopy(model_->options(), std::move(full)));
  return MakeSnapshot(whole, learner_->version());
}

ProgressSnapshot LearnerSession::Progress(const TrainedStep& step, double elapsed_seconds,
                                          double buffer_fill, double tokens_per_s) const {
  return ProgressSnapshot{.step = step.result.optimizer.step,
                          .max_steps = config_.run.max_steps,
                          .reward = step.reward_mean,
                          .success = step.success_rate,
                          .learner_utilization = busy_seconds_ / std::max(1e-9, elapsed_seconds),
                          .mean_lag = step.lag_mean,
                          .buffer_fill = buffer_fill,
                          .tokens_per_s = tokens_per_s,
                          .elapsed_seconds = elapsed_seconds,
                          .max_wall_seconds = config_.run.max_wall_seconds};
}

absl::Status LearnerSession::Checkpoint() {
  if (step() == last_checkpoint_step_) return absl::OkStatus();
  if (leads()) RETURN_IF_ERROR(Broadcast(Command::kCheckpoint, nullptr));
  return SaveCheckpoint(step());
}

absl::Status LearnerSession::SaveCheckpoint(int64_t step) {
  if (config_.learner.sharding != ShardingMode::kNone) {
    RETURN_IF_ERROR(
        SaveShardedCheckpoint(*checkpoints_, *learner_, group_, hooks_.checkpoint_extra).status());
    last_checkpoint_step_ = step;
    return absl::OkStatus();
  }
  // Parameters and optimiser state are replicated: rank 0's full checkpoint resumes at any N.
  if (run_dir_ == nullptr) {
    last_checkpoint_step_ = step;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(checkpoints_
                      ->Save(step,
                             [this](const std::string& dir) {
                               RETURN_IF_ERROR(
                                   SaveStateDict(StrCat(dir, "/", kCheckpointModelFile), *model_));
                               RETURN_IF_ERROR(WriteTrainerState(dir, learner_->optimizer()));
                               return hooks_.checkpoint_extra ? hooks_.checkpoint_extra(dir)
                                                              : absl::OkStatus();
                             })
                      .status());
  last_checkpoint_step_ = step;
  return absl::OkStatus();
}

absl::Status RunFollowerRank(c10::intrusive_ptr<c10d::Store> store, int rank,
                             const JobConfig& config, const ModelOptions& model_options,
                             bool resume) {
  torch::set_num_threads(1);
  dist::CommunicatorOptions options;
  options.name = "embedded learner group";
  ASSIGN_OR_RETURN(std::unique_ptr<dist::Communicator> comm,
                   dist::Communicator::Create(std::move(store), rank,
                                              static_cast<int>(config.learner.world_size),
                                              options));
  ASSIGN_OR_RETURN(std::unique_ptr<LearnerSession> session,
                   LearnerSession::Open(config, model_options, resume, comm.get()));
  return session->Follow();
}

}  // namespace flywheel
