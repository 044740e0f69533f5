// Learner cost of branching agent executions trained as flat paths (every selected path its own
// causal document, shared prefixes repeated) vs as trees (each shared prefix once, exact
// weighting), on executions of the repair harness (retries, summaries, sub-agents). Both run
// the same small transformer forward + backward of a PPO-clip contribution loss, alternating
// over rounds; the same comparison again with at most J_max paths per execution.
//
// Each arm attends the way the learner trains that form: flat rows are documents back to back,
// so they get the packed layout's per-document attention (PackedLayout's doc_lengths →
// DocumentAttention, what LearnerStep runs on packed rows); tree rows attend per tree segment
// through its block of the ancestor mask (TreeLayout's doc_lengths, DocumentAttention with the
// mask), what the tree learner runs. With the dense [L, L] mask on either arm, time_ratio also
// counted scores across documents or trees, not only the tokens a tree shares.
//
// Where the executions come from (`--param source=`):
//   scripted  the harness with its scripted agent (expert plan + noise), seeds 1..N (default)
//   training  a short tree-job training run (runtime/tree_job.h): imitation of the scripted
//             agent, then the harness driven by a transformer sampled by the rollout engine,
//             trained on its trees between steps; the last N executions of the run (newest
//             policy versions)
//   --param calls=PATH  the executions of a call log, e.g. runs/<name>/calls.jsonl of a run
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

#include "bench/registry.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/attention_layout.h"
#include "flywheel/model/transformer.h"
#include "flywheel/runtime/tree_job.h"
#include "flywheel/trajectory/call_log.h"
#include "flywheel/trajectory/path_selection.h"
#include "flywheel/trajectory/repair_harness.h"
#include "flywheel/trajectory/tree_training.h"

namespace flywheel::bench {
namespace {

torch::Tensor PpoClip(const torch::Tensor& logp, const torch::Tensor& logmu,
                      const torch::Tensor& adv) {
  const torch::Tensor ratio = torch::exp(logp - logmu);
  return -torch::min(ratio * adv, torch::clamp(ratio, 0.8, 1.2) * adv);
}

// The documents of each row of flat paths (PackFlatPaths: every path a run of tokens whose
// parent is the column before, from a root): their lengths, as PackedLayout takes them.
absl::StatusOr<std::vector<std::vector<int64_t>>> FlatDocuments(const PackedTrees& packed) {
  std::vector<std::vector<int64_t>> docs(packed.rows);
  for (int64_t r = 0; r < packed.rows; ++r) {
    const std::vector<int64_t>& parents = packed.parents[r];
    for (size_t c = 0; c < parents.size(); ++c) {
      const auto col = static_cast<int64_t>(c);
      if (parents[c] == -1) {
        docs[r].push_back(1);
      } else if (parents[c] == col - 1 && !docs[r].empty()) {
        ++docs[r].back();
      } else {
        return absl::InvalidArgumentError(StrCat("bench trajectory-tree: flat row ", r, " column ",
                                                 c, " has parent ", parents[c],
                                                 ", not the column before: not a flat path"));
      }
    }
  }
  return docs;
}

// Tensors of a packed batch; for flat paths with the per-document layout (`documents` non-null).
// The tree layout's mask and positions equal PackedLayout's for flat rows (CheckFlatLayout), so
// only its documents are added: the forward then attends per document and ignores the mask.
absl::StatusOr<TreeBatchTensors> BatchTensors(const PackedTrees& packed, bool per_document) {
  absl::StatusOr<TreeBatchTensors> batch = ToTensors(packed);
  if (!batch.ok() || !per_document) return batch;
  absl::StatusOr<std::vector<std::vector<int64_t>>> docs = FlatDocuments(packed);
  if (!docs.ok()) return docs.status();
  batch->layout.doc_lengths = std::move(*docs);
  batch->layout.documents_masked = false;  // causal documents, not blocks of the mask
  return batch;
}

// Once per batch, outside the timing: the flat rows' tree layout is exactly PackedLayout of their
// documents (same positions, same block-diagonal causal mask), so the per-document forward
// computes the function the dense one does.
absl::Status CheckFlatLayout(const PackedTrees& flat) {
  absl::StatusOr<TreeBatchTensors> tree = ToTensors(flat);
  if (!tree.ok()) return tree.status();
  absl::StatusOr<std::vector<std::vector<int64_t>>> docs = FlatDocuments(flat);
  if (!docs.ok()) return docs.status();
  absl::StatusOr<AttentionLayout> packed = MakePackedLayout(*docs, flat.length);
  if (!packed.ok()) return packed.status();
  if (!torch::equal(packed->positions, tree->layout.positions) ||
      !torch::equal(packed->allowed, tree->layout.allowed)) {
    return absl::InternalError(
        "bench trajectory-tree: the flat rows' tree layout differs from PackedLayout of their "
        "documents; the per-document forward would train a different function");
  }
  return absl::OkStatus();
}

// One learner step on a packed batch: forward, loss, backward. Returns seconds.
absl::StatusOr<double> Step(Transformer& model, const PackedTrees& packed, bool per_document) {
  const auto start = std::chrono::steady_clock::now();
  model->zero_grad();
  absl::StatusOr<TreeBatchTensors> batch = BatchTensors(packed, per_document);
  if (!batch.ok()) return batch.status();
  const torch::Tensor logits = model->forward(batch->tokens, batch->layout);
  const torch::Tensor logp = ContributionLogprobs(logits, *batch, SamplingParams{});
  ContributionLoss(logp, *batch, PpoClip).backward();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<torch::Tensor> Grads(Transformer& model) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
  return grads;
}

struct TreeComparison {
  PackedTrees flat, tree;
  double flat_s = 0, tree_s = 0;  // total over rounds
  // The fastest round of each: on a shared machine the least disturbed measurement.
  double flat_best_s = 1e300, tree_best_s = 1e300;
};

// A short training run of the tree job on the harness's repair options; its last `executions`
// executions. `about` gets what the run was.
absl::StatusOr<std::vector<Execution>> TrainingExecutions(const BenchArgs& args,
                                                          const RepairHarnessOptions& harness,
                                                          int64_t executions,
                                                          nlohmann::json& about) {
  JobConfig job;
  const std::filesystem::path runs =
      std::filesystem::temp_directory_path() / StrCat("flywheel_bench_trajectory_tree_", getpid());
  std::filesystem::remove_all(runs);
  job.run.runs_dir = runs.string();
  job.run.name = "tree";
  job.run.seed = args.GetInt("train_seed", 1);
  job.run.max_steps = args.GetInt("train_steps", args.quick ? 2 : 4);
  job.model.hidden_size = args.GetInt("train_hidden", 64);
  job.model.num_layers = args.GetInt("train_layers", 2);
  job.model.num_heads = 4;
  job.model.num_kv_heads = 2;
  job.model.intermediate_size = 2 * job.model.hidden_size;
  job.model.max_seq_len = 512;
  job.env.kind = EnvKind::kRepair;
  job.env.repair = harness.repair;
  job.learner.loss = PolicyLossKind::kPpoClip;
  job.learner.lr = args.GetDouble("train_lr", 3e-3);
  job.learner.checkpoint_every = 0;
  job.tree.enabled = true;
  // Cloning the scripted agent first, so the policy writes actions the environment accepts.
  job.tree.imitation_steps = args.GetInt("train_imitation", args.quick ? 10 : 150);
  job.tree.instances_per_step = args.GetInt("train_instances", args.quick ? 2 : 4);
  job.tree.executions_per_instance = args.GetInt("train_group", args.quick ? 2 : 4);
  job.tree.max_new_tokens = args.GetInt("max_new_tokens", 12);
  job.tree.max_retries = harness.max_retries;
  job.tree.max_subagents = harness.max_subagents;
  job.tree.summarize_after_tokens = harness.summarize_after_tokens;
  if (absl::Status s = job.Validate(); !s.ok()) return s;
  absl::StatusOr<TreeJobResult> run = RunTreeJob(job, TreeJobRunOptions{nullptr, true});
  if (!run.ok()) return run.status();
  std::vector<Execution> out = std::move(run->executions);
  if (static_cast<int64_t>(out.size()) > executions) {
    out.erase(out.begin(), out.end() - executions);
  }
  const VersionRange versions = BehaviourVersions(out);
  about = {{"steps", run->steps},
           {"imitation_steps", job.tree.imitation_steps},
           {"lr", job.learner.lr},
           {"executions_per_step", job.tree.instances_per_step * job.tree.executions_per_instance},
           {"model", {{"hidden", job.model.hidden_size}, {"layers", job.model.num_layers}}},
           {"reward_first_step", run->first_reward},
           {"reward_last_step", run->last_reward},
           {"behaviour_versions", {versions.min, versions.max}},
           {"calls_log", (run->run_dir / "calls.jsonl").string()},
           {"metrics", run->metrics}};
  return out;
}

}  // namespace

absl::StatusOr<BenchReport> RunTrajectoryTreeBench(const BenchArgs& args) {
  const int64_t executions = args.GetInt("executions", args.quick ? 4 : 16);
  const int64_t rounds = args.GetInt("rounds", args.quick ? 1 : 5);
  RepairHarnessOptions harness;
  harness.repair.num_lines = args.GetInt("num_lines", 8);
  harness.repair.num_bugs = args.GetInt("num_bugs", 2);
  harness.max_retries = static_cast<int>(args.GetInt("max_retries", 3));
  harness.max_subagents = static_cast<int>(args.GetInt("max_subagents", 3));
  harness.summarize_after_tokens = args.GetInt("summarize_after", 160);
  harness.noise = args.GetDouble("noise", 0.4);

  const std::string calls_path = args.GetString("calls", "");
  const std::string source =
      calls_path.empty() ? args.GetString("source", "scripted") : std::string("calls");
  std::vector<Execution> runs;
  nlohmann::json about;
  if (source == "scripted") {
    for (int64_t i = 0; i < executions; ++i) {
      absl::StatusOr<Execution> e = RunRepairHarness(harness, static_cast<uint64_t>(i + 1));
      if (!e.ok()) return e.status();
      runs.push_back(std::move(*e));
    }
    about = "repair harness, scripted agent (expert plan + noise), word tokens";
  } else if (source == "training") {
    absl::StatusOr<std::vector<Execution>> trained =
        TrainingExecutions(args, harness, executions, about);
    if (!trained.ok()) return trained.status();
    runs = std::move(*trained);
  } else if (source == "calls") {
    std::ifstream in(calls_path);
    if (!in) return absl::NotFoundError(StrCat("bench trajectory-tree: cannot read ", calls_path));
    absl::StatusOr<std::vector<Execution>> read = ReadCallLog(in, calls_path);
    if (!read.ok()) return read.status();
    runs = std::move(*read);
    if (static_cast<int64_t>(runs.size()) > executions) {
      runs.erase(runs.begin(), runs.end() - executions);
    }
    about = {{"calls_log", calls_path}};
  } else {
    return absl::InvalidArgumentError(StrCat(
        "bench trajectory-tree: --param source must be scripted or training, got '", source, "'"));
  }
  if (runs.empty()) return absl::InvalidArgumentError("bench trajectory-tree: no executions");

  std::vector<TrajectoryTree> trees;
  int64_t longest_path = 0, largest_tree = 0, calls = 0, max_token = 0;
  for (const Execution& e : runs) {
    calls += static_cast<int64_t>(e.calls.size());
    for (const LlmCall& c : e.calls) {
      for (int32_t t : c.context) max_token = std::max<int64_t>(max_token, t);
      for (int32_t t : c.generated) max_token = std::max<int64_t>(max_token, t);
    }
    absl::StatusOr<TrajectoryTree> tree = TrajectoryTree::FromExecution(e);
    if (!tree.ok()) return tree.status();
    largest_tree = std::max(largest_tree, tree->NumNodes());
    for (const TreePath& p : tree->Paths())
      longest_path = std::max<int64_t>(longest_path, p.length);
    trees.push_back(std::move(*tree));
  }
  const int64_t length = (std::max(largest_tree, longest_path) + 127) / 128 * 128;

  absl::StatusOr<std::unique_ptr<WordTokenizer>> tokenizer =
      MakeRepairHarnessTokenizer(harness.repair);
  if (!tokenizer.ok()) return tokenizer.status();
  ModelOptions mo;
  // A call log may come from another tokenizer: the vocabulary covers every token it holds.
  mo.vocab_size = std::max((*tokenizer)->vocab_size(), max_token + 1);
  mo.hidden_size = args.GetInt("hidden", 128);
  mo.num_layers = args.GetInt("layers", 2);
  mo.num_heads = 4;
  mo.num_kv_heads = 2;
  mo.intermediate_size = 2 * mo.hidden_size;
  mo.max_seq_len = length;
  torch::manual_seed(1);
  absl::StatusOr<Transformer> model = MakeTransformer(mo);
  if (!model.ok()) return model.status();

  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> adv(-1.0f, 1.0f);
  std::map<int, TreeComparison> by_j;  // 0 = uncapped
  double grad_diff = 0;
  for (int j : {0, 1, 2, 5}) {
    std::vector<TreeTrainingItem> items;
    for (const TrajectoryTree& tree : trees) {
      TreeTrainingItem item{&tree, SelectPaths(tree.Paths(), j).selected, {}};
      for (size_t p = 0; p < item.paths.size(); ++p) item.advantages.push_back(adv(rng));
      items.push_back(std::move(item));
    }
    TreeComparison c;
    absl::StatusOr<PackedTrees> flat = PackFlatPaths(items, length, PathAggregation::kTokenMean);
    if (!flat.ok()) return flat.status();
    absl::StatusOr<PackedTrees> tree =
        PackTrees(items, length, TreeWeighting::kExact, PathAggregation::kTokenMean);
    if (!tree.ok()) return tree.status();
    c.flat = std::move(*flat);
    c.tree = std::move(*tree);
    if (absl::Status s = CheckFlatLayout(c.flat); !s.ok()) return s;
    // Warm-up of both, which also checks the exact gradients agree (flat per document, tree
    // per tree segment through the ancestor mask: the same loss by two attention paths).
    if (absl::StatusOr<double> s = Step(*model, c.flat, true); !s.ok()) return s.status();
    const std::vector<torch::Tensor> gf = Grads(*model);
    if (absl::StatusOr<double> s = Step(*model, c.tree, false); !s.ok()) return s.status();
    const std::vector<torch::Tensor> gt = Grads(*model);
    for (size_t i = 0; i < gf.size(); ++i) {
      grad_diff = std::max(grad_diff, (gf[i] - gt[i]).abs().max().item<double>());
    }
    for (int64_t r = 0; r < rounds; ++r) {  // alternate, so drift hits both alike
      absl::StatusOr<double> f = Step(*model, c.flat, true);
      if (!f.ok()) return f.status();
      absl::StatusOr<double> t = Step(*model, c.tree, false);
      if (!t.ok()) return t.status();
      c.flat_s += *f;
      c.tree_s += *t;
      c.flat_best_s = std::min(c.flat_best_s, *f);
      c.tree_best_s = std::min(c.tree_best_s, *t);
    }
    by_j[j] = std::move(c);
  }

  BenchReport report;
  report.config = {
      {"executions", static_cast<int64_t>(runs.size())},
      {"rounds", rounds},
      {"llm_calls", calls},
      {"row_length", length},
      {"source", source},
      {"workload", about},
      {"num_lines", harness.repair.num_lines},
      {"num_bugs", harness.repair.num_bugs},
      {"max_retries", harness.max_retries},
      {"max_subagents", harness.max_subagents},
      {"summarize_after_tokens", harness.summarize_after_tokens},
      {"noise", harness.noise},
      {"model", {{"vocab", mo.vocab_size}, {"hidden", mo.hidden_size}, {"layers", mo.num_layers}}},
      {"loss", "PPO-clip (0.8, 1.2), exact weighting, token mean"},
      {"flat_attention", "per document (PackedLayout doc_lengths, DocumentAttention)"},
      {"tree_attention",
       "per tree segment, its block of the ancestor mask (TreeLayout doc_lengths)"}};
  const double n = static_cast<double>(static_cast<int64_t>(runs.size()) * rounds);
  report.table = {{"J_max", "tokens flat", "tokens tree", "rows flat/tree", "flat s/exec",
                   "tree s/exec", "time ratio", "best round"}};
  const double uncapped_tree_s = by_j[0].tree_s;
  const double uncapped_flat_s = by_j[0].flat_s;
  for (const auto& [j, c] : by_j) {
    const std::string name = j == 0 ? "uncapped" : StrCat(j);
    const double ratio = c.flat_s / c.tree_s;
    report.results[name] = {
        {"tokens_flat", c.flat.real_tokens},
        {"tokens_tree", c.tree.real_tokens},
        {"rows_flat", c.flat.rows},
        {"rows_tree", c.tree.rows},
        {"token_ratio", static_cast<double>(c.flat.real_tokens) / c.tree.real_tokens},
        {"flat_seconds_per_execution", c.flat_s / n},
        {"tree_seconds_per_execution", c.tree_s / n},
        {"time_ratio", ratio},
        {"time_ratio_best_round", c.flat_best_s / c.tree_best_s},
        {"tree_time_relative_to_uncapped", c.tree_s / uncapped_tree_s},
        {"flat_time_relative_to_uncapped", c.flat_s / uncapped_flat_s}};
    report.table.push_back({name, StrCat(c.flat.real_tokens), StrCat(c.tree.real_tokens),
                            StrCat(c.flat.rows, "/", c.tree.rows),
                            fmt::format("{:.4f}", c.flat_s / n),
                            fmt::format("{:.4f}", c.tree_s / n), fmt::format("{:.2f}", ratio),
                            fmt::format("{:.2f}", c.flat_best_s / c.tree_best_s)});
  }
  const TreeComparison& u = by_j[0];
  report.ratios["tokens_flat"] = u.flat.real_tokens;
  report.ratios["tokens_tree"] = u.tree.real_tokens;
  report.ratios["token_ratio"] = static_cast<double>(u.flat.real_tokens) / u.tree.real_tokens;
  report.ratios["time_ratio"] = u.flat_s / u.tree_s;
  report.ratios["time_ratio_best_round"] = u.flat_best_s / u.tree_best_s;
  report.ratios["grad_max_abs_diff"] = grad_diff;
  report.ratios["grads_match"] = grad_diff < 1e-4;
  report.summary = fmt::format(
      "{} executions: uncapped: {} tokens flat vs {} tree ({:.2f}x), learner time flat/tree "
      "{:.2f}x (best round {:.2f}x); exact gradients max |diff| {:.2e}",
      source, u.flat.real_tokens, u.tree.real_tokens,
      static_cast<double>(u.flat.real_tokens) / u.tree.real_tokens, u.flat_s / u.tree_s,
      u.flat_best_s / u.tree_best_s, grad_diff);
  return report;
}

}  // namespace flywheel::bench
