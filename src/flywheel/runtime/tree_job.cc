#include "flywheel/runtime/tree_job.h"

#include <torch/torch.h>

#include <chrono>
#include <fstream>

#include "flywheel/actor/engine_harness_policy.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/learner/tree_learner.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/runtime/blas_choice.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/run_directory.h"
#include "flywheel/runtime/run_stop.h"
#include "flywheel/trajectory/call_log.h"
#include "flywheel/trajectory/repair_harness.h"

namespace flywheel {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Negative steps are imitation steps.
absl::Status AtStep(int64_t step, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), StrCat("tree job ", step < 0 ? "imitation step " : "step ",
                                       step < 0 ? -step : step, ": ", ToStd(s.message())));
}

}  // namespace

absl::StatusOr<TreeJobResult> RunTreeJob(const JobConfig& config, const TreeJobRunOptions& run) {
  if (!config.tree.enabled) {
    return absl::InvalidArgumentError("tree job: set tree.enabled = true to run it");
  }
  if (config.env.kind != EnvKind::kRepair) {
    return absl::InvalidArgumentError(
        "tree job: the harness runs the repair task; set env.kind = \"repair\"");
  }
  const TreeJobOptions& tree = config.tree;
  RepairHarnessOptions harness;
  harness.repair = config.env.repair;
  harness.max_retries = static_cast<int>(tree.max_retries);
  harness.max_subagents = static_cast<int>(tree.max_subagents);
  harness.summarize_after_tokens = tree.summarize_after_tokens;
  harness.max_attempt_turns = tree.max_attempt_turns;
  RETURN_IF_ERROR(harness.Validate());

  ASSIGN_OR_RETURN(const std::unique_ptr<WordTokenizer> tokenizer,
                   MakeRepairHarnessTokenizer(harness.repair));
  ASSIGN_OR_RETURN(const ModelOptions model_options,
                   ResolveModelOptions(config, *tokenizer, "the repair harness tokenizer"));
  if (model_options.device != "cpu") {
    // Its tree tensors (prefix sharing, per-contribution weights) are built on the host.
    return absl::UnimplementedError(StrCat("model.device = \"", model_options.device,
                                           "\": the tree job trains on the CPU only"));
  }
  ASSIGN_OR_RETURN(const BlasChoice blas,
                   ChooseBlasThreads(BlasRole::kEmbedded, config.run.blas_threads, model_options,
                                     config.learner.token_budget));
  torch::manual_seed(static_cast<uint64_t>(config.run.seed));
  ASSIGN_OR_RETURN(Transformer model, MakeInitialModel(model_options));

  TreeLearnerOptions lo;
  lo.j_max = static_cast<int>(tree.j_max);
  lo.weighting = tree.weighting;
  lo.aggregation = config.learner.aggregation == LossAggregation::kSequenceMean
                       ? PathAggregation::kSequenceMean
                       : PathAggregation::kTokenMean;
  lo.divide_by_std = tree.divide_by_std;
  lo.grpo_eps = config.learner.grpo_eps;
  lo.loss = LossOptions::FromLearnerOptions(config.learner);
  lo.sampling = config.sampling;
  RETURN_IF_ERROR(lo.Validate());
  TreeLearner learner(model, lo,
                      OptimizerOptions::FromLearnerOptions(
                          config.learner, config.run.max_steps + tree.imitation_steps));

  ASSIGN_OR_RETURN(const std::unique_ptr<RunDirectory> run_dir,
                   RunDirectory::Open(config.run.runs_dir, config.run.name, FormatJobConfig(config),
                                      /*resume=*/false));
  const std::filesystem::path calls_path = run_dir->path() / "calls.jsonl";
  std::ofstream calls_out(calls_path, std::ios::app);
  if (!calls_out) {
    return absl::UnavailableError(StrCat("tree job: cannot open ", calls_path.string()));
  }

  const auto start = std::chrono::steady_clock::now();
  // Checked before every learner step and every execution, the units of work here.
  const RunStop stop(config.run.max_wall_seconds, run.stop);
  for (int64_t step = 1; step <= tree.imitation_steps && !stop.Reached(); ++step) {
    RepairHarnessOptions scripted = harness;
    scripted.noise = tree.imitation_noise;
    std::vector<Execution> executions;
    const int64_t n = tree.instances_per_step * tree.executions_per_instance;
    for (int64_t i = 0; i < n; ++i) {
      // Instances of their own seed range, apart from the ones reinforcement learning sees.
      const uint64_t seed = static_cast<uint64_t>(config.run.seed) * 1000003ull + (1ull << 40) +
                            static_cast<uint64_t>((step - 1) * n + i);
      absl::StatusOr<Execution> e = RunRepairHarness(scripted, seed);
      if (!e.ok()) return AtStep(-step, e.status());
      executions.push_back(std::move(*e));
    }
    absl::StatusOr<TreeStepResult> trained = learner.ImitationStep(executions);
    if (!trained.ok()) return AtStep(-step, trained.status());
    nlohmann::json line = trained->ToJson();
    line["phase"] = "imitation";
    line["imitation_step"] = step;
    line["version"] = learner.version();
    line["elapsed_seconds"] = Seconds(start);
    RETURN_IF_ERROR(run_dir->AppendMetrics(line));
    if (run.progress != nullptr && (step % 10 == 0 || step == tree.imitation_steps)) {
      std::fprintf(run.progress, "imitation step %lld  version %lld  loss (−log π) %.4f\n",
                   static_cast<long long>(step), static_cast<long long>(learner.version()),
                   trained->loss);
      std::fflush(run.progress);
    }
  }

  absl::StatusOr<std::shared_ptr<const WeightSnapshot>> snapshot =
      MakeSnapshot(learner.model(), learner.version());
  if (!snapshot.ok()) return snapshot.status();
  ASSIGN_OR_RETURN(const std::unique_ptr<RolloutEngine> engine,
                   RolloutEngine::Create(config.actor.engine, *snapshot));
  EngineHarnessPolicyOptions po;
  po.sampling = config.sampling;
  po.max_new_tokens = tree.max_new_tokens;
  po.seed = static_cast<uint64_t>(config.run.seed) * 0x9E3779B97F4A7C15ull;
  EngineHarnessPolicy policy(engine.get(), po);

  TreeJobResult result;
  result.run_dir = run_dir->path();
  for (int64_t step = 1; step <= config.run.max_steps && !stop.Reached(); ++step) {
    const auto rollout_start = std::chrono::steady_clock::now();
    std::vector<Execution> executions;
    for (int64_t i = 0; i < tree.instances_per_step && !stop.Reached(); ++i) {
      // Fresh instances every step, a function of the run's seed.
      const uint64_t seed = static_cast<uint64_t>(config.run.seed) * 1000003ull +
                            static_cast<uint64_t>((step - 1) * tree.instances_per_step + i);
      for (int64_t k = 0; k < tree.executions_per_instance && !stop.Reached(); ++k) {
        absl::StatusOr<Execution> e =
            RunRepairHarness(harness, seed, policy, StrCat("repair-", seed, "-", k));
        if (!e.ok()) return AtStep(step, e.status());
        executions.push_back(std::move(*e));
      }
    }
    if (stop.Reached()) break;  // a step's executions are a whole batch or none
    const double rollout_s = Seconds(rollout_start);
    WriteCallLog(executions, calls_out);
    calls_out.flush();
    if (!calls_out) return absl::DataLossError(StrCat("tree job: writing ", calls_path.string()));

    int64_t calls = 0;
    for (const Execution& e : executions) calls += static_cast<int64_t>(e.calls.size());
    const VersionRange versions = BehaviourVersions(executions);
    const auto train_start = std::chrono::steady_clock::now();
    absl::StatusOr<TreeStepResult> trained = learner.Step(executions);
    if (!trained.ok()) return AtStep(step, trained.status());
    const double train_s = Seconds(train_start);
    if (step % config.learner.publish_every == 0) {
      snapshot = MakeSnapshot(learner.model(), learner.version());
      if (!snapshot.ok()) return AtStep(step, snapshot.status());
      engine->PublishSnapshot(*snapshot);
    }

    nlohmann::json line = trained->ToJson();
    line["phase"] = "reinforce";
    line["step"] = step;
    line["version"] = learner.version();
    line["reward_mean"] = trained->reward_mean;
    line["token_ratio"] =
        static_cast<double>(trained->tokens_flat) / static_cast<double>(trained->tokens_tree);
    line["llm_calls"] = calls;
    line["behaviour_version_min"] = versions.min;
    line["behaviour_version_max"] = versions.max;
    line["rollout_seconds"] = rollout_s;
    line["train_seconds"] = train_s;
    line["elapsed_seconds"] = Seconds(start);
    RETURN_IF_ERROR(run_dir->AppendMetrics(line));
    if (run.progress != nullptr) {
      std::fprintf(run.progress,
                   "step %lld  version %lld  reward %.3f  calls %lld  tokens flat/tree %lld/%lld "
                   "(%.2fx)  loss %.4f  behaviour versions %lld..%lld\n",
                   static_cast<long long>(step), static_cast<long long>(learner.version()),
                   trained->reward_mean, static_cast<long long>(calls),
                   static_cast<long long>(trained->tokens_flat),
                   static_cast<long long>(trained->tokens_tree), line["token_ratio"].get<double>(),
                   trained->loss, static_cast<long long>(versions.min),
                   static_cast<long long>(versions.max));
      std::fflush(run.progress);
    }
    if (result.steps == 0) result.first_reward = trained->reward_mean;
    result.last_reward = trained->reward_mean;
    result.steps = step;
    result.version = learner.version();
    result.metrics.push_back(line);
    if (run.keep_executions) {
      for (Execution& e : executions) result.executions.push_back(std::move(e));
    }
  }
  nlohmann::json summary = {
      {"job", "tree"},
      {"steps", result.steps},
      {"version", result.version},
      {"first_reward", result.first_reward},
      {"last_reward", result.last_reward},
      {"calls", calls_path.string()},
      {"stopped_by",
       result.steps >= config.run.max_steps ? "max_steps" : std::string(stop.Reason())},
      {"elapsed_seconds", Seconds(start)},
      {"blas", blas.ToJson()}};
  RETURN_IF_ERROR(run_dir->WriteSummary(summary));
  return result;
}

}  // namespace flywheel
