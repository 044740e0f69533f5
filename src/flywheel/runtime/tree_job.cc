#include "flywheel/runtime/tree_job.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>

#include "absl/time/clock.h"
#include "flywheel/actor/engine_harness_policy.h"
#include "flywheel/buffer/buffer.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/learner/checkpoint.h"
#include "flywheel/learner/trainer_state.h"
#include "flywheel/learner/tree_learner.h"
#include "flywheel/model/safetensors.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/runtime/blas_choice.h"
#include "flywheel/runtime/harness_actors.h"
#include "flywheel/runtime/harness_eval.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/run_directory.h"
#include "flywheel/runtime/run_stop.h"
#include "flywheel/trajectory/call_log.h"
#include "flywheel/trajectory/execution_record.h"
#include "flywheel/trajectory/repair_harness.h"

namespace flywheel {
namespace {

// How long the learner waits for a group before it rechecks its actors and the stop.
constexpr absl::Duration kSamplePoll = absl::Milliseconds(200);
// What a checkpoint of the tree job adds to the model and trainer state: how many of its
// optimiser steps were imitation and how many reinforcement steps.
constexpr const char* kTreeJobStateFile = "tree_job.json";

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Negative steps are imitation steps.
absl::Status AtStep(int64_t step, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), StrCat("tree job ", step < 0 ? "imitation step " : "step ",
                                       step < 0 ? -step : step, ": ", ToStd(s.message())));
}

class TreeJob {
 public:
  TreeJob(const JobConfig& config, const TreeJobRunOptions& run)
      : config_(config), tree_(config.tree), run_(run) {}
  ~TreeJob() { StopActors(); }

  absl::Status Init();
  absl::Status Imitate(const RunStop& stop);
  absl::Status TrainColocated(const RunStop& stop);
  absl::Status TrainAsync(const RunStop& stop);
  absl::StatusOr<TreeJobResult> Finish(const RunStop& stop);

 private:
  // The calls log, metrics line, progress, publishing and checkpoint after reinforcement step
  // `step`; `extra` adds the deployment's own fields to the metrics line.
  absl::Status AfterStep(int64_t step, std::vector<Execution>& executions,
                         const TreeStepResult& trained, double rollout_s, double train_s,
                         nlohmann::json extra);
  absl::Status SaveCheckpoint();
  absl::Status Restore(const std::string& checkpoint);
  void StopActors();

  const JobConfig& config_;
  const TreeJobOptions& tree_;
  const TreeJobRunOptions& run_;
  RepairHarnessOptions harness_;
  std::optional<TreeLearner> learner_;
  std::unique_ptr<RunDirectory> run_dir_;
  std::unique_ptr<CheckpointManager> checkpoints_;
  std::ofstream calls_out_;
  std::filesystem::path calls_path_;
  BlasChoice blas_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int64_t imitation_done_ = 0;         // imitation steps in the learner's weights
  int64_t step_ = 0;                   // reinforcement steps in the learner's weights
  int64_t last_checkpoint_step_ = -1;  // optimiser step of the newest checkpoint
  std::string restored_from_;
  // Where the weights go after a step: the colocated engine or the async actors.
  std::function<void(std::shared_ptr<const WeightSnapshot>)> publish_;
  std::unique_ptr<Buffer> buffer_;  // async
  std::unique_ptr<HarnessActors> actors_;
  TreeJobResult result_;
  nlohmann::json summary_extra_ = nlohmann::json::object();  // the mode's own summary fields
};

absl::Status TreeJob::Init() {
  if (!tree_.enabled) {
    return absl::InvalidArgumentError("tree job: set tree.enabled = true to run it");
  }
  if (config_.env.kind != EnvKind::kRepair) {
    return absl::InvalidArgumentError(
        "tree job: the harness runs the repair task; set env.kind = \"repair\"");
  }
  if (config_.run.mode == TrainMode::kElastic) {
    return absl::InvalidArgumentError(
        "tree job: run.mode = \"elastic\" is not supported; use \"async\" or \"colocated\"");
  }
  harness_.repair = config_.env.repair;
  harness_.max_retries = static_cast<int>(tree_.max_retries);
  harness_.max_subagents = static_cast<int>(tree_.max_subagents);
  harness_.summarize_after_tokens = tree_.summarize_after_tokens;
  harness_.max_attempt_turns = tree_.max_attempt_turns;
  RETURN_IF_ERROR(harness_.Validate());

  ASSIGN_OR_RETURN(const std::unique_ptr<WordTokenizer> tokenizer,
                   MakeRepairHarnessTokenizer(harness_.repair));
  ASSIGN_OR_RETURN(const ModelOptions model_options,
                   ResolveModelOptions(config_, *tokenizer, "the repair harness tokenizer"));
  if (model_options.device != "cpu") {
    // Its tree tensors (prefix sharing, per-contribution weights) are built on the host.
    return absl::UnimplementedError(StrCat("model.device = \"", model_options.device,
                                           "\": the tree job trains on the CPU only"));
  }
  ASSIGN_OR_RETURN(blas_, ChooseBlasThreads(BlasRole::kEmbedded, config_.run.blas_threads,
                                            model_options, config_.learner.token_budget));
  torch::manual_seed(static_cast<uint64_t>(config_.run.seed));
  ASSIGN_OR_RETURN(Transformer model, MakeInitialModel(model_options));

  TreeLearnerOptions lo;
  lo.j_max = static_cast<int>(tree_.j_max);
  lo.weighting = tree_.weighting;
  lo.packing = tree_.packing;
  lo.aggregation = config_.learner.aggregation == LossAggregation::kSequenceMean
                       ? PathAggregation::kSequenceMean
                       : PathAggregation::kTokenMean;
  lo.divide_by_std = tree_.divide_by_std;
  lo.grpo_eps = config_.learner.grpo_eps;
  lo.loss = LossOptions::FromLearnerOptions(config_.learner);
  lo.sampling = config_.sampling;
  RETURN_IF_ERROR(lo.Validate());
  learner_.emplace(
      model, lo,
      OptimizerOptions::FromLearnerOptions(config_.learner, TreeJobScheduleSteps(config_)));

  ASSIGN_OR_RETURN(run_dir_, RunDirectory::Open(config_.run.runs_dir, config_.run.name,
                                                FormatJobConfig(config_), run_.resume));
  checkpoints_ = std::make_unique<CheckpointManager>(
      CheckpointOptions{run_dir_->checkpoints().string(), config_.learner.keep_last});
  if (run_.resume) {
    ASSIGN_OR_RETURN(const std::optional<std::string> latest, checkpoints_->Latest());
    if (!latest.has_value()) {
      return absl::NotFoundError(
          StrCat("--resume: no complete checkpoint in ", checkpoints_->options().directory));
    }
    RETURN_IF_ERROR(Restore(*latest));
  }
  calls_path_ = run_dir_->path() / "calls.jsonl";
  calls_out_.open(calls_path_, std::ios::app);
  if (!calls_out_) {
    return absl::UnavailableError(StrCat("tree job: cannot open ", calls_path_.string()));
  }
  result_.run_dir = run_dir_->path();
  return absl::OkStatus();
}

absl::Status TreeJob::Restore(const std::string& checkpoint) {
  // The model is the learner's own (a module holder shares its parameters).
  Transformer model = learner_->model();
  RETURN_IF_ERROR(LoadStateDict(StrCat(checkpoint, "/", kCheckpointModelFile), *model));
  RETURN_IF_ERROR(ReadTrainerState(checkpoint, learner_->optimizer()));
  const std::filesystem::path state_path = std::filesystem::path(checkpoint) / kTreeJobStateFile;
  std::ifstream in(state_path);
  const nlohmann::json state = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!state.is_object() || !state.contains("imitation_steps") ||
      !state.contains("reinforce_steps")) {
    return absl::DataLossError(StrCat("--resume: ", state_path.string(),
                                      " is missing or unreadable; it is not a tree job's "
                                      "checkpoint"));
  }
  imitation_done_ = state["imitation_steps"].get<int64_t>();
  step_ = state["reinforce_steps"].get<int64_t>();
  last_checkpoint_step_ = learner_->optimizer().step();
  restored_from_ = checkpoint;
  return absl::OkStatus();
}

absl::Status TreeJob::SaveCheckpoint() {
  const int64_t step = learner_->optimizer().step();
  if (step == last_checkpoint_step_) return absl::OkStatus();
  RETURN_IF_ERROR(checkpoints_
                      ->Save(step,
                             [this](const std::string& dir) -> absl::Status {
                               RETURN_IF_ERROR(SaveStateDict(StrCat(dir, "/", kCheckpointModelFile),
                                                             *learner_->model()));
                               RETURN_IF_ERROR(WriteTrainerState(dir, learner_->optimizer()));
                               std::ofstream out(std::filesystem::path(dir) / kTreeJobStateFile);
                               out << nlohmann::json{{"imitation_steps", imitation_done_},
                                                     {"reinforce_steps", step_}}
                                          .dump()
                                   << "\n";
                               if (!out) return absl::DataLossError("writing tree_job.json");
                               return absl::OkStatus();
                             })
                      .status());
  last_checkpoint_step_ = step;
  return absl::OkStatus();
}

absl::Status TreeJob::Imitate(const RunStop& stop) {
  Optimizer& optimizer = learner_->optimizer();
  if (tree_.imitation_lr > 0) optimizer.set_peak_lr(tree_.imitation_lr);
  for (int64_t step = imitation_done_ + 1;
       step <= tree_.imitation_steps && step_ == 0 && !stop.Reached(); ++step) {
    RepairHarnessOptions scripted = harness_;
    scripted.noise = tree_.imitation_noise;
    scripted.give_up = tree_.imitation_give_up;
    std::vector<Execution> executions;
    const int64_t n = tree_.instances_per_step * tree_.executions_per_instance;
    for (int64_t i = 0; i < n; ++i) {
      // Instances of their own seed range, apart from the ones reinforcement learning sees.
      const uint64_t seed = static_cast<uint64_t>(config_.run.seed) * 1000003ull + (1ull << 40) +
                            static_cast<uint64_t>((step - 1) * n + i);
      absl::StatusOr<Execution> e = RunRepairHarness(scripted, seed);
      if (!e.ok()) return AtStep(-step, e.status());
      executions.push_back(std::move(*e));
    }
    absl::StatusOr<TreeStepResult> trained = learner_->ImitationStep(executions);
    if (!trained.ok()) return AtStep(-step, trained.status());
    imitation_done_ = step;
    nlohmann::json line = trained->ToJson();
    line["phase"] = "imitation";
    line["imitation_step"] = step;
    line["version"] = learner_->version();
    line["elapsed_s"] = Seconds(start_);
    RETURN_IF_ERROR(run_dir_->AppendMetrics(line));
    if (run_.progress != nullptr && (step % 10 == 0 || step == tree_.imitation_steps)) {
      std::fprintf(run_.progress, "imitation step %lld  version %lld  loss (−log π) %.4f\n",
                   static_cast<long long>(step), static_cast<long long>(learner_->version()),
                   trained->loss);
      std::fflush(run_.progress);
    }
  }
  optimizer.set_peak_lr(config_.learner.lr);  // reinforcement learning's, also when resumed
  return absl::OkStatus();
}

absl::Status TreeJob::TrainColocated(const RunStop& stop) {
  // Rollout and training alternate: each step's executions are sampled with the newest weights.
  ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> snapshot,
                   MakeSnapshot(learner_->model(), learner_->version()));
  ASSIGN_OR_RETURN(const std::unique_ptr<RolloutEngine> engine,
                   RolloutEngine::Create(config_.actor.engine, snapshot));
  publish_ = [&engine](std::shared_ptr<const WeightSnapshot> s) {
    engine->PublishSnapshot(std::move(s));
  };
  EngineHarnessPolicyOptions po;
  po.sampling = config_.sampling;
  po.max_new_tokens = tree_.max_new_tokens;
  po.seed = static_cast<uint64_t>(config_.run.seed) * 0x9E3779B97F4A7C15ull +
            static_cast<uint64_t>(step_) * 0x100000001B3ull;
  EngineHarnessPolicy policy(engine.get(), po);
  while (step_ < config_.run.max_steps && !stop.Reached()) {
    const int64_t step = step_ + 1;
    const auto rollout_start = std::chrono::steady_clock::now();
    std::vector<Execution> executions;
    for (int64_t i = 0; i < tree_.instances_per_step && !stop.Reached(); ++i) {
      // Fresh instances every step, a function of the run's seed.
      const uint64_t seed = static_cast<uint64_t>(config_.run.seed) * 1000003ull +
                            static_cast<uint64_t>((step - 1) * tree_.instances_per_step + i);
      for (int64_t k = 0; k < tree_.executions_per_instance && !stop.Reached(); ++k) {
        absl::StatusOr<Execution> e =
            RunRepairHarness(harness_, seed, policy, StrCat("repair-", seed, "-", k));
        if (!e.ok()) return AtStep(step, e.status());
        executions.push_back(std::move(*e));
      }
    }
    if (stop.Reached()) break;  // a step's executions are a whole batch or none
    const double rollout_s = Seconds(rollout_start);
    const auto train_start = std::chrono::steady_clock::now();
    absl::StatusOr<TreeStepResult> trained = learner_->Step(executions);
    if (!trained.ok()) return AtStep(step, trained.status());
    step_ = step;
    RETURN_IF_ERROR(AfterStep(step, executions, *trained, rollout_s, Seconds(train_start),
                              nlohmann::json::object()));
  }
  publish_ = nullptr;
  return absl::OkStatus();
}

absl::Status TreeJob::TrainAsync(const RunStop& stop) {
  BufferOptions bo = config_.buffer;
  bo.group_size = tree_.executions_per_instance;  // one GRPO group: a whole instance
  bo.min_group_size = bo.group_size;
  bo.durable = false;   // in memory, as the embedded job's
  bo.remember_ids = 0;  // no insert is retried in process
  if (bo.max_staleness < 0) bo.max_staleness = config_.learner.max_staleness;
  bo.max_size = std::max(bo.max_size, tree_.instances_per_step);
  ASSIGN_OR_RETURN(buffer_, Buffer::Create(bo));
  buffer_->SetLearnerVersion(learner_->version());

  HarnessActorsOptions ao;
  ao.num_actors = config_.actor.num_actors;
  ao.harness = harness_;
  ao.policy.sampling = config_.sampling;
  ao.policy.max_new_tokens = tree_.max_new_tokens;
  ao.policy.seed = static_cast<uint64_t>(config_.run.seed) * 0x9E3779B97F4A7C15ull +
                   static_cast<uint64_t>(step_) * 0x100000001B3ull;
  ao.engine = config_.actor.engine;
  ao.executions_per_instance = tree_.executions_per_instance;
  ao.max_instances_ahead = static_cast<int64_t>(
      std::ceil(config_.run.max_pipeline_batches * static_cast<double>(tree_.instances_per_step)));
  // A resumed run plays instances it has not seen: the counter starts elsewhere per version.
  ao.instance_seed = static_cast<uint64_t>(config_.run.seed) * 1000003ull +
                     static_cast<uint64_t>(learner_->version()) * 0x9E3779B97F4A7C15ull;
  ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> snapshot,
                   MakeSnapshot(learner_->model(), learner_->version()));
  ASSIGN_OR_RETURN(actors_, HarnessActors::Start(ao, snapshot, buffer_.get()));
  publish_ = [this](std::shared_ptr<const WeightSnapshot> s) { actors_->Publish(s); };

  while (step_ < config_.run.max_steps && !stop.Reached()) {
    const int64_t step = step_ + 1;
    const auto wait_start = std::chrono::steady_clock::now();
    std::vector<Execution> executions;
    int64_t groups = 0;
    while (groups < tree_.instances_per_step && !stop.Reached()) {
      absl::StatusOr<std::vector<SampledItem>> items =
          buffer_->Sample(tree_.instances_per_step - groups, absl::Now() + kSamplePoll);
      if (absl::IsDeadlineExceeded(items.status())) {
        RETURN_IF_ERROR(AtStep(step, actors_->FirstError()));
        continue;
      }
      if (!items.ok()) return AtStep(step, items.status());
      for (const SampledItem& sampled : *items) {
        for (const ItemMember& member : sampled.item->members) {
          absl::StatusOr<Execution> e = TrajectoryToExecution(*member.trajectory);
          if (!e.ok()) return AtStep(step, e.status());
          executions.push_back(*std::move(e));
        }
        ++groups;
      }
      actors_->Wake();  // the groups taken made room
    }
    // Stopping: the groups already taken from the buffer are trained on, not thrown away.
    if (executions.empty()) break;
    const double wait_s = Seconds(wait_start);
    const int64_t version_before = learner_->version();
    const auto train_start = std::chrono::steady_clock::now();
    absl::StatusOr<TreeStepResult> trained = learner_->Step(executions);
    if (!trained.ok()) return AtStep(step, trained.status());
    step_ = step;
    buffer_->SetLearnerVersion(learner_->version());
    const BufferInfo info = buffer_->Info();
    nlohmann::json extra = {{"groups", groups},
                            {"lag_max", version_before - BehaviourVersions(executions).min},
                            {"buffer_size", info.table.size},
                            {"dropped",
                             {{"buffer_stale", info.dropped_stale},
                              {"buffer_incomplete_group", info.dropped_incomplete_group},
                              {"buffer_evicted", info.dropped_evicted}}}};
    RETURN_IF_ERROR(AfterStep(step, executions, *trained, wait_s, Seconds(train_start), extra));
  }
  StopActors();
  const BufferInfo info = buffer_->Info();
  summary_extra_["groups"] = {{"sampled", info.sampled},
                              {"left_in_buffer", info.table.size},
                              {"dropped_stale", info.dropped_stale},
                              {"dropped_incomplete", info.dropped_incomplete_group},
                              {"dropped_evicted", info.dropped_evicted}};
  summary_extra_["executions_played"] = actors_->executions();
  summary_extra_["instances_started"] = actors_->instances_started();
  return absl::OkStatus();
}

void TreeJob::StopActors() {
  publish_ = nullptr;
  // The actors first: an insert they are waiting on ends at its next poll, not as an error.
  if (actors_ != nullptr) actors_->Stop();
  if (buffer_ != nullptr) buffer_->Close();
}

absl::Status TreeJob::AfterStep(int64_t step, std::vector<Execution>& executions,
                                const TreeStepResult& trained, double rollout_s, double train_s,
                                nlohmann::json extra) {
  WriteCallLog(executions, calls_out_);
  calls_out_.flush();
  if (!calls_out_) return AtStep(step, absl::DataLossError("writing " + calls_path_.string()));
  if (step % config_.learner.publish_every == 0) {
    absl::StatusOr<std::shared_ptr<const WeightSnapshot>> snapshot =
        MakeSnapshot(learner_->model(), learner_->version());
    if (!snapshot.ok()) return AtStep(step, snapshot.status());
    publish_(*std::move(snapshot));
  }
  int64_t calls = 0;
  for (const Execution& e : executions) calls += static_cast<int64_t>(e.calls.size());
  const VersionRange versions = BehaviourVersions(executions);
  nlohmann::json line = trained.ToJson();
  line["phase"] = "reinforce";
  line["step"] = step;
  line["version"] = learner_->version();
  line["reward_mean"] = trained.reward_mean;
  int64_t successes = 0;
  for (const Execution& e : executions) {
    successes += e.final_reward.value_or(0.0f) >= config_.run.success_reward;  // timeouts fail
  }
  line["success_rate"] = static_cast<double>(successes) / static_cast<double>(executions.size());
  line["token_ratio"] =
      static_cast<double>(trained.tokens_flat) / static_cast<double>(trained.tokens_tree);
  line["llm_calls"] = calls;
  line["behaviour_version_min"] = versions.min;
  line["behaviour_version_max"] = versions.max;
  // Colocated: the rollout; async: the wait for the batch.
  line[config_.run.mode == TrainMode::kAsync ? "wait_seconds" : "rollout_seconds"] = rollout_s;
  line["train_seconds"] = train_s;
  line["elapsed_s"] = Seconds(start_);  // the other jobs' name: flywheel report's time axis
  line.update(extra);
  RETURN_IF_ERROR(run_dir_->AppendMetrics(line));
  if (run_.progress != nullptr) {
    std::fprintf(run_.progress,
                 "step %lld  version %lld  reward %.3f  calls %lld  tokens flat/tree %lld/%lld "
                 "(%.2fx)  loss %.4f  behaviour versions %lld..%lld\n",
                 static_cast<long long>(step), static_cast<long long>(learner_->version()),
                 trained.reward_mean, static_cast<long long>(calls),
                 static_cast<long long>(trained.tokens_flat),
                 static_cast<long long>(trained.tokens_tree), line["token_ratio"].get<double>(),
                 trained.loss, static_cast<long long>(versions.min),
                 static_cast<long long>(versions.max));
    std::fflush(run_.progress);
  }
  if (result_.metrics.empty()) result_.first_reward = trained.reward_mean;
  result_.last_reward = trained.reward_mean;
  result_.metrics.push_back(line);
  if (run_.keep_executions) {
    for (Execution& e : executions) result_.executions.push_back(std::move(e));
  }
  if (config_.learner.checkpoint_every > 0 && step % config_.learner.checkpoint_every == 0) {
    RETURN_IF_ERROR(AtStep(step, SaveCheckpoint()));
  }
  return absl::OkStatus();
}

absl::StatusOr<TreeJobResult> TreeJob::Finish(const RunStop& stop) {
  if (config_.learner.checkpoint_every > 0) RETURN_IF_ERROR(SaveCheckpoint());
  result_.steps = step_;
  result_.version = learner_->version();
  nlohmann::json summary = {
      {"job", "tree"},
      {"mode", config_.run.mode == TrainMode::kAsync ? "async" : "colocated"},
      {"packing", PackingName(tree_.packing)},
      {"steps", result_.steps},
      {"imitation_steps", imitation_done_},
      {"version", result_.version},
      {"first_reward", result_.first_reward},
      {"last_reward_mean", result_.last_reward},  // the names the other jobs' summaries use
      {"calls", calls_path_.string()},
      {"stopped_by", step_ >= config_.run.max_steps ? "max_steps" : std::string(stop.Reason())},
      {"wall_seconds", Seconds(start_)},
      {"blas", blas_.ToJson()}};
  if (!result_.metrics.empty()) {  // every reinforcement line has success_rate
    summary["last_success_rate"] = result_.metrics.back()["success_rate"];
  }
  if (!restored_from_.empty()) summary["resumed_from"] = restored_from_;
  summary.update(summary_extra_);
  // A stop request skips the evaluation (the user asked to stop); a wall budget does not. The
  // final policy on instances of their own, derived from run.seed alone, so two runs of the same
  // seed (the imitated policy, a trained one) are evaluated on the same instances.
  if (config_.run.eval_episodes > 0 && stop.Reason() != "signal") {
    EngineHarnessPolicyOptions po;
    po.sampling = config_.sampling;
    po.max_new_tokens = tree_.max_new_tokens;
    ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> weights,
                     MakeSnapshot(learner_->model(), learner_->version()));
    ASSIGN_OR_RETURN(
        result_.eval,
        EvaluateHarnessPolicy(harness_, config_.actor.engine, po, std::move(weights),
                              config_.run.eval_episodes, static_cast<uint64_t>(config_.run.seed),
                              config_.run.success_reward));
    summary["eval"] = result_.eval->ToJson();
    if (run_.progress != nullptr) {
      std::fprintf(run_.progress, "evaluation: %lld executions, success %.3f, reward %.3f ± %.3f\n",
                   static_cast<long long>(result_.eval->episodes), result_.eval->success_rate,
                   result_.eval->reward_mean, result_.eval->reward_stderr);
    }
  }
  RETURN_IF_ERROR(run_dir_->WriteSummary(summary));
  return std::move(result_);
}

}  // namespace

int64_t TreeJobScheduleSteps(const JobConfig& config) {
  return config.learner.total_steps > 0 ? config.learner.total_steps
                                        : config.run.max_steps + config.tree.imitation_steps;
}

absl::StatusOr<TreeJobResult> RunTreeJob(const JobConfig& config, const TreeJobRunOptions& run) {
  TreeJob job(config, run);
  RETURN_IF_ERROR(job.Init());
  // Checked before every learner step and every execution, the units of work here.
  const RunStop stop(config.run.max_wall_seconds, run.stop);
  RETURN_IF_ERROR(job.Imitate(stop));
  if (config.run.mode == TrainMode::kAsync) {
    RETURN_IF_ERROR(job.TrainAsync(stop));
  } else {
    RETURN_IF_ERROR(job.TrainColocated(stop));
  }
  return job.Finish(stop);
}

}  // namespace flywheel
