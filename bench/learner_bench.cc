// Trained tokens/s of one learner optimiser step on the same model, packed batch and thread count:
//   (a) flywheel: LearnerStep (staleness filter, advantages, packer, PackedLayout forward of the
//       transformer — attention within each document, DocumentAttention — truncated-IS
//       loss, backward with gradient accumulation, clip, AdamW)
//   (b) python:   plain eager PyTorch (bench/learner_python.py) on the same packed micro-batches,
//       same weights (a safetensors file written here), same loss, clip and AdamW, fused q/k/v
//       and gate/up projections; attention within each document (a loop of batched matmuls
//       over the documents, what DocumentAttention computes)
//   (c) python dense: the same script with the dense [L, L] block-diagonal additive mask per
//       row (torch 1.13 has no SDPA), the form a packed row is often written in
// and ratio_vs_python = a / b, ratio_vs_python_dense = a / c. The three run alternately,
// `rounds` times each; medians are reported.
//
// Agreement: each side's first step (on the same initial weights and batch, before AdamW moves
// them) reports its loss and pre-clip gradient norm; the bench fails unless flywheel and each
// peer agree within kAgreementTolerance (see there), so the ratio compares equal computations.
//
// Model-FLOP utilisation: mfu = 6 · N · T / seconds / peak, where N is the parameter count (the
// tied embedding once: it is the LM head's GEMM), T the real (non-padding) tokens trained per
// step, 6 = 2 (forward) + 4 (backward) FLOPs per parameter per token; attention-score FLOPs are
// not counted (the usual convention). peak = float32 matmul GFLOP/s measured here with the same
// thread count (MeasureMatmulGflops, `flywheel bench matmul`).
//
// On a GPU (--param device=cuda, dtype=bfloat16; docs/gpu.md, "Benchmarks on the GPU") the
// model and the optimiser live on the device, the forward runs under autocast (AutocastScope, as
// the job's TransformerPolicy does), timings are bracketed by torch::cuda::synchronize(), the
// one Python peer runs the same step on the device under torch.autocast with
// scaled_dot_product_attention per document (`--attention sdpa`, the interpreter `peer_python`,
// default python3: the one with CUDA's torch), agreeing to bfloat16's precision
// (kPlacedAgreementTolerance), and MFU is against `peak_tflops` (default: a
// bfloat16 8192^3 matmul measured on the device, MeasureDeviceMatmulTflops) and also against
// `spec_peak_tflops` (default 989: H200 dense bfloat16), each with and without the attention
// FLOPs (6 · layers · heads · head_dim · Σ document length² per step: QKᵀ and AV, causal half,
// forward and backward).
//
// Packing: padding waste and distinct [rows, L] shapes over `pack_steps` (200) steps of
// length-mixed agent trajectories through the learner's packer with carry_over, as the learner
// runs it (buckets and token budget of a real job, not of the small throughput model).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "bench/agent_batch.h"
#include "bench/registry.h"
#include "bench/torch_profile.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/learner/advantages.h"
#include "flywheel/learner/learner_step.h"
#include "flywheel/learner/packer.h"
#include "flywheel/model/blas_threads.h"
#include "flywheel/model/placement.h"
#include "flywheel/model/safetensors.h"
#include "flywheel/model/torch_status.h"
#include "flywheel/model/transformer.h"
#include "flywheel/runtime/transformer_policy.h"

namespace flywheel::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Loss and gradient norm of flywheel's first step against a peer's. Both sum the same float32
// terms in different orders (GEMM blocking, per-document vs dense softmax rows, fused vs split
// gradient buffers), so the figures differ by rounding: float32 carries about 7 significant
// digits, and the 1e3–1e4 token terms of a loss or the 1e5–1e7 squared gradient entries of a
// norm accumulate a relative error of order 1e-7…1e-6. An absolute 1e-5 holds while the figures
// are O(1) (the default model: measured differences 1e-9…1e-7); a larger model's gradient norm
// need not stay O(1), so the bound is 1e-5 absolute or 1e-5 relative to the larger figure,
// whichever is looser. A real difference is far above it: a causal mask off by one position
// moved the --quick batch's loss by 6e-4 (20 %) and its gradient norm by 1e-3.
constexpr double kAgreementTolerance = 1e-5;

struct FirstStep {
  double loss = 0;
  double grad_norm = 0;
};

// On the GPU arm flywheel and the peer run in bfloat16 under autocast with different kernels (and
// flywheel's three q/k/v GEMMs against the peer's fused one), so their first steps agree only to
// bfloat16's precision: measured there, reported, and a miss nulls the ratio instead of failing a
// borrowed machine's one run.
constexpr double kPlacedAgreementTolerance = 2e-2;

// One peer variant of the Python script (`--attention documents`, `dense` or `sdpa`).
struct PythonRun {
  PythonRun(std::string attention, const char* key, const char* ratio, const char* label,
            double tolerance)
      : attention(std::move(attention)), key(key), ratio(ratio), label(label),
        tolerance(tolerance) {}

  std::string attention;
  const char* key;    // results.<key>, tokens_per_s.<key>
  const char* ratio;  // top-level ratio
  const char* label;  // the table's row
  double tolerance;   // absolute or relative, on the first step's loss and gradient norm
  std::vector<double> seconds;  // per round
  nlohmann::json json;          // the last round's report
  double loss_abs_diff = 0;     // worst over the rounds, against flywheel's first step
  double grad_norm_abs_diff = 0;
  bool ok = true;

  bool Agrees(double a, double b) const {
    const double diff = std::abs(a - b);
    return diff < tolerance || diff < tolerance * std::max(std::abs(a), std::abs(b));
  }

  // Records one round's report; a first step that disagrees with flywheel's is an error.
  absl::Status Add(nlohmann::json report, const FirstStep& fly) {
    const double loss = report["first_step"]["loss"].get<double>();
    const double norm = report["first_step"]["grad_norm"].get<double>();
    loss_abs_diff = std::max(loss_abs_diff, std::abs(loss - fly.loss));
    grad_norm_abs_diff = std::max(grad_norm_abs_diff, std::abs(norm - fly.grad_norm));
    ok = ok && Agrees(loss, fly.loss) && Agrees(norm, fly.grad_norm);
    seconds.push_back(report["seconds"].get<double>());
    json = std::move(report);
    if (!ok) {
      return absl::InternalError(fmt::format(
          "learner bench: python {} peer's first step disagrees with flywheel's on the same "
          "weights and batch: loss {:.9g} vs {:.9g}, grad norm {:.9g} vs {:.9g} (tolerance {:g} "
          "absolute or relative); the two sides no longer compute the same step",
          attention, loss, fly.loss, norm, fly.grad_norm, tolerance));
    }
    return absl::OkStatus();
  }

  nlohmann::json Agreement() const {
    return {{"loss_abs_diff", loss_abs_diff},
            {"grad_norm_abs_diff", grad_norm_abs_diff},
            {"tolerance", tolerance},
            {"ok", ok}};
  }
};

// Writes the weights and the packed step once; returns the peer script's arguments.
absl::StatusOr<std::string> PreparePython(const ModelOptions& m,
                                          const LearnerOptions& o, const Transformer& model,
                                          const PackedStep& packed, int64_t steps,
                                          int64_t threads, const std::filesystem::path& dir) {
  // The weights as they are now, on the host in float32 (SaveStateDict moves them there).
  const std::string weights = (dir / "weights.safetensors").string();
  const std::string batch = (dir / "batch.safetensors").string();
  const std::string spec_path = (dir / "spec.json").string();
  RETURN_IF_ERROR(SaveStateDict(weights, *model));
  NamedTensors tensors;
  nlohmann::json mbs = nlohmann::json::array();
  for (size_t i = 0; i < packed.micro_batches.size(); ++i) {
    const PackedMicroBatch& mb = packed.micro_batches[i];
    const std::string p = StrCat("mb", i, ".");
    tensors.emplace_back(p + "tokens", mb.tokens);
    tensors.emplace_back(p + "targets", mb.targets);
    tensors.emplace_back(p + "trainable", mb.trainable);
    tensors.emplace_back(p + "behaviour", mb.behaviour_logprobs);
    tensors.emplace_back(p + "advantages", mb.advantages);
    tensors.emplace_back(p + "loss_weights", mb.loss_weights);
    mbs.push_back({{"rows", mb.rows}, {"length", mb.length}, {"doc_lengths", mb.doc_lengths}});
  }
  RETURN_IF_ERROR(WriteSafetensors(batch, tensors));  // float32: token ids < 2^24 are exact
  nlohmann::json spec = {{"model",
                          {{"hidden_size", m.hidden_size},
                           {"num_layers", m.num_layers},
                           {"num_heads", m.num_heads},
                           {"num_kv_heads", m.num_kv_heads},
                           {"head_dim", m.HeadDim()},
                           {"qk_norm", m.qk_norm},
                           {"rope_theta", m.rope_theta},
                           {"rms_norm_eps", m.rms_norm_eps}}},
                         {"device", m.device},
                         {"dtype", m.dtype},
                         {"micro_batches", mbs},
                         {"steps", steps},
                         {"threads", threads},
                         {"lr", o.lr},
                         {"is_cap", o.is_cap},
                         {"grad_clip", o.grad_clip},
                         {"betas", {o.beta1, o.beta2}},
                         {"eps", o.adam_eps},
                         {"weight_decay", o.weight_decay}};
  std::ofstream(spec_path) << spec.dump();
  return StrCat("--weights '", weights, "' --batch '", batch, "' --spec '", spec_path, "'");
}

struct PackingTally {
  int64_t real = 0, capacity = 0;
  std::set<std::pair<int64_t, int64_t>> shapes;
  double waste() const { return capacity ? 1.0 - static_cast<double>(real) / capacity : 0.0; }
};

// The learner's packer with carry_over over `steps` length-mixed batches.
absl::StatusOr<PackingTally> MeasurePacking(const BenchArgs& args, int64_t steps,
                                            std::vector<int64_t> buckets) {
  LearnerOptions o;
  o.buckets = std::move(buckets);
  o.token_budget = args.GetInt("pack_token_budget", 16384);
  o.carry_over = true;
  Packer packer(PackerOptions::FromLearnerOptions(o));
  std::mt19937_64 rng(args.GetInt("seed", 1));
  PackingTally tally;
  std::vector<Trajectory> held;
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<Trajectory> input = held;
    const auto carried = static_cast<int64_t>(held.size());
    std::vector<Trajectory> fresh =
        MakeAgentBatch(rng, args.GetInt("pack_batch", 64),
                       {.median = args.GetDouble("pack_median_len", 700),
                        .max_len = o.buckets.back(),
                        .vocab = 1000},
                       s);
    input.insert(input.end(), fresh.begin(), fresh.end());
    std::vector<std::vector<float>> adv;
    for (const Trajectory& t : input) adv.emplace_back(t.tokens.size(), 1.0f);
    ASSIGN_OR_RETURN(PackedStep step, packer.Pack(input, adv, carried));
    tally.real += step.real_tokens;
    tally.capacity += step.capacity_tokens;
    for (const auto& mb : step.micro_batches) tally.shapes.insert({mb.rows, mb.length});
    held.clear();
    for (int64_t i : step.held_back) held.push_back(input[i]);
  }
  return tally;
}

// Mean seconds per step of each phase (forward includes the log-probs; backward the loss).
nlohmann::json PerStep(const PhaseTimes& t) {
  nlohmann::json out = nlohmann::json::object();
  for (int p = 0; p < kNumPhases; ++p) {
    out[PhaseName(static_cast<Phase>(p))] = t.steps ? t.seconds[p] / t.steps : 0.0;
  }
  return out;
}

// Attention-score FLOPs of one training step over `packed`: per document of n real tokens
// QKᵀ and AV cost 2 · 2 · heads · head_dim · n² / 2 (causal) forward, twice that backward.
double AttentionFlopsPerStep(const ModelOptions& m, const PackedStep& packed) {
  double sum_sq = 0;
  for (const PackedMicroBatch& mb : packed.micro_batches) {
    for (const auto& row : mb.doc_lengths) {
      for (int64_t n : row) sum_sq += static_cast<double>(n) * static_cast<double>(n);
    }
  }
  return 6.0 * static_cast<double>(m.num_layers * m.num_heads * m.HeadDim()) * sum_sq;
}

}  // namespace

absl::StatusOr<BenchReport> RunLearnerBench(const BenchArgs& args) {
  ModelOptions m;
  const std::string preset = args.GetString("model", "small");
  if (preset != "small" && preset != "qwen3-0.6b") {
    return absl::InvalidArgumentError(
        StrCat("learner bench: --param model=", preset, ": use small or qwen3-0.6b"));
  }
  m.vocab_size = 512;
  m.hidden_size = 128;
  m.num_layers = 2;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  // --param model=qwen3-0.6b: the shape of `flywheel bench rollout-gpu`; the knobs below still
  // override it.
  if (preset == "qwen3-0.6b") SetQwen3_0_6BShape(m);
  m.vocab_size = args.GetInt("vocab", m.vocab_size);
  m.hidden_size = args.GetInt("hidden", m.hidden_size);
  m.num_layers = args.GetInt("layers", m.num_layers);
  m.num_heads = args.GetInt("heads", m.num_heads);
  m.num_kv_heads = args.GetInt("kv_heads", m.num_kv_heads);
  m.head_dim = args.GetInt("head_dim", m.head_dim);
  // Llama's MLP ratio (344 / 128 = 2.6875) at every width, so a `hidden` sweep keeps the shape.
  m.intermediate_size = args.GetInt(
      "intermediate", preset == "small" ? m.hidden_size * 344 / 128 : m.intermediate_size);
  m.max_seq_len = 4096;
  m.seed = 1;
  m.device = args.GetString("device", "cpu");
  m.dtype = args.GetString("dtype", "float32");
  RETURN_IF_ERROR(m.Validate());
  // Anything but the CPU in float32 is the GPU arm: extra fields in the report, one Python peer.
  const bool placed = m.device != "cpu" || m.dtype != "float32";
  ASSIGN_OR_RETURN(const torch::Device device, ModelDevice(m));
  const torch::ScalarType dtype = ModelDtype(m);
  const int64_t threads = args.GetInt("threads", 1);
  const int64_t steps = args.GetInt("steps", args.quick ? 1 : 5);
  const int64_t rounds = std::max<int64_t>(1, args.GetInt("rounds", args.quick ? 1 : 3));
  const int64_t batch_size = args.GetInt("batch", args.quick ? 4 : 16);
  const double median = args.GetDouble("median_len", args.quick ? 40 : 200);
  const int64_t pack_steps = args.GetInt("pack_steps", args.quick ? 20 : 200);
  const bool run_python = args.GetString("python", "on") != "off";
  if (threads <= 0 || steps <= 0 || batch_size <= 0) {
    return absl::InvalidArgumentError("learner bench: threads, steps and batch must be > 0");
  }
  at::set_num_threads(static_cast<int>(threads));
  (void)SetBlasThreads(static_cast<int>(threads));  // no-op where the BLAS is not OpenBLAS

  LearnerOptions o;
  o.loss = PolicyLossKind::kTruncatedIs;
  o.max_staleness = -1;  // the same batch is trained on every step
  o.buckets = args.quick ? std::vector<int64_t>{64, 128} : std::vector<int64_t>{256, 512, 1024};
  if (args.params.count("buckets")) {
    ASSIGN_OR_RETURN(o.buckets, ParseIntList(args, "buckets", ""));
    if (!std::is_sorted(o.buckets.begin(), o.buckets.end(), std::less_equal<int64_t>())) {
      return absl::InvalidArgumentError(StrCat("learner bench: --param buckets wants ascending "
                                               "lengths, got '",
                                               args.GetString("buckets", ""), "'"));
    }
  }
  o.token_budget = args.GetInt("token_budget", args.quick ? 256 : 4096);
  o.lr = 1e-4;

  ASSIGN_OR_RETURN(Transformer model, MakeTransformer(m));
  if (placed) {  // float32 master weights on the device, before the optimiser takes them
    RETURN_IF_ERROR(TorchCall("learner bench: placing the model", [&] { model->to(device); }));
  }
  std::mt19937_64 rng(args.GetInt("seed", 1));
  const std::vector<Trajectory> batch = MakeAgentBatch(
      rng, batch_size, {.median = median, .max_len = o.buckets.back(), .vocab = m.vocab_size}, 0);

  // The packed step the learner will train on (same options, same batch), for the Python peer.
  ASSIGN_OR_RETURN(auto advantages,
                   ComputeAdvantages(batch, AdvantageOptions::FromLearnerOptions(o)));
  Packer packer(PackerOptions::FromLearnerOptions(o));
  ASSIGN_OR_RETURN(PackedStep packed, packer.Pack(batch, advantages));
  const int64_t tokens_per_step = packed.real_tokens;

  const auto dir =
      std::filesystem::temp_directory_path() / StrCat("flywheel_learner_bench_", ::getpid());
  std::filesystem::create_directories(dir);
  // The peers: on the CPU in float32 the two attention forms, agreeing to 1e-5; on the GPU arm
  // one, the same SDPA per document as flywheel's GPU build (the CPU in bfloat16: the loop of
  // matmuls, torch 1.13 having no SDPA), under the interpreter that has CUDA's torch.
  std::vector<PythonRun> peers;
  if (!placed) {
    peers.emplace_back("documents", "python", "ratio_vs_python", "python eager, per document",
                       kAgreementTolerance);
    peers.emplace_back("dense", "python_dense", "ratio_vs_python_dense",
                       "python eager, dense mask", kAgreementTolerance);
  } else {
    peers.emplace_back(device.is_cuda() ? "sdpa" : "documents", "python", "ratio_vs_python",
                       device.is_cuda() ? "python eager, SDPA per document"
                                        : "python eager, per document",
                       kPlacedAgreementTolerance);
  }
  const std::string python =
      args.GetString("peer_python", device.is_cuda() ? "python3" : kPeerPython);
  std::string py_skipped;
  std::string py_args;
  if (!run_python) {
    py_skipped = "python variant off (--param python=off)";
  } else if (py_skipped = PythonPeerSkipReason(python, device.is_cuda()); py_skipped.empty()) {
    // Written before flywheel trains, so both start from the same weights.
    ASSIGN_OR_RETURN(py_args, PreparePython(m, o, model, packed, steps, threads, dir));
  }

  // The job's own forward: packed documents, under autocast in bfloat16.
  const PolicyForward forward = TransformerPolicy(model);
  LearnerStep learner(o, 1000000, model->parameters(), forward);
  // Warm-up, and the first step on the initial weights that the peers' first steps must match.
  ASSIGN_OR_RETURN(LearnerStepResult first, learner.Step(batch));
  const FirstStep fly_first{first.loss, first.optimizer.grad_norm};

  std::vector<double> fly_runs;
  std::vector<double> fly_losses;
  PhaseTimes phases;  // where flywheel's step time goes, summed over the timed steps
  bool released = false;  // flywheel's cached device memory was handed back for the peer
  for (int64_t r = 0; r < rounds; ++r) {
    // Untimed: the allocator takes its blocks back from the driver, as in the first round.
    if (released) RETURN_IF_ERROR(learner.Step(batch).status());
    released = false;
    SynchronizeDevice(device);
    const auto start = Clock::now();
    for (int64_t s = 0; s < steps; ++s) {
      ASSIGN_OR_RETURN(LearnerStepResult result, learner.Step(batch));
      if (r == 0) fly_losses.push_back(result.loss);
      phases.Add(result.times);
    }
    SynchronizeDevice(device);
    fly_runs.push_back(SecondsSince(start));
    if (!py_args.empty()) {
      // The peer shares the GPU: flywheel's cached blocks (tens of GiB at this size) go back.
      ReleaseCachedDeviceMemory(device);
      released = device.is_cuda();
      for (PythonRun& peer : peers) {
        absl::StatusOr<nlohmann::json> out =
            RunPythonPeer(args, "bench/learner_python.py",
                          StrCat(py_args, " --attention ", peer.attention), threads,
                          (dir / "out.json").string(), "", python);
        // The GPU arm keeps flywheel's figures (a borrowed machine's one run): a peer that fails
        // is reported in its place, one that disagrees in its agreement.
        if (!out.ok() && placed) {
          py_skipped = StrCat("python peer failed: ", out.status().message());
          spdlog::warn("learner bench: {}", py_skipped);
          py_args.clear();
          break;
        }
        absl::Status agreed = out.ok() ? peer.Add(std::move(*out), fly_first) : out.status();
        if (!agreed.ok() && !placed) {
          std::filesystem::remove_all(dir);
          return agreed;
        }
      }
    }
  }
  std::filesystem::remove_all(dir);

  // --param profile=TRACE.json: one more flywheel step under LibTorch's profiler, after the
  // timed ones (the profiler slows what it records). A profiler that fails is reported, not fatal.
  nlohmann::json profile = nullptr;
  if (const std::string path = args.GetString("profile", ""); !path.empty()) {
    if (released) RETURN_IF_ERROR(learner.Step(batch).status());  // as before a timed round
    SynchronizeDevice(device);
    const absl::Status profiled = WriteTorchProfile(path, device.is_cuda(), [&]() -> absl::Status {
      RETURN_IF_ERROR(learner.Step(batch).status());
      SynchronizeDevice(device);
      return absl::OkStatus();
    });
    profile = profiled.ok() ? nlohmann::json(path) : nlohmann::json(profiled.ToString());
    if (!profiled.ok()) spdlog::warn("learner bench: no profile: {}", profiled.ToString());
  }

  const double fly_s = Percentile(fly_runs, 0.5);
  const double trained = static_cast<double>(tokens_per_step * steps);
  const double fly_tps = trained / fly_s;
  const int64_t peak_n = args.GetInt("matmul_n", args.quick ? 256 : 1024);
  const double peak_gflops = MeasureMatmulGflops(peak_n, args.quick ? 2 : 10);
  const double n_params = static_cast<double>(model->NumParameters());
  const double mfu = 6.0 * n_params * fly_tps / (peak_gflops * 1e9);
  // The GPU arm's MFU: against the device's bfloat16 (or float32) matmul and the card's spec.
  nlohmann::json device_mfu = nullptr;
  if (placed) {
    double measured_tflops = 0;
    if (device.is_cuda()) {
      RETURN_IF_ERROR(TorchCall("learner bench: device matmul", [&] {
        measured_tflops = MeasureDeviceMatmulTflops(
            device, dtype, args.GetInt("device_matmul_n", 8192), args.quick ? 3 : 10);
      }));
    } else {
      measured_tflops = peak_gflops / 1e3;  // the CPU's float32 matmul, as the default path
    }
    const double peak_tflops = args.GetDouble("peak_tflops", measured_tflops);
    const double spec_tflops = args.GetDouble("spec_peak_tflops", 989.0);
    const double model_flops_per_s = 6.0 * n_params * fly_tps;
    const double attention_flops_per_s = AttentionFlopsPerStep(m, packed) * steps / fly_s;
    device_mfu = {
        {"device", device.str()},
        {"dtype", m.dtype},
        {"measured_matmul_tflops", measured_tflops},
        {"measured_matmul",
         device.is_cuda() ? StrCat(m.dtype, " ", args.GetInt("device_matmul_n", 8192), "^3 on ",
                                   device.str())
                          : "float32 matmul on the CPU (matmul_peak_gflops)"},
        {"peak_tflops", peak_tflops},
        {"peak_source", args.params.count("peak_tflops") ? "--param peak_tflops" : "measured"},
        {"spec_peak_tflops", spec_tflops},
        {"model_tflops_per_s", model_flops_per_s / 1e12},
        {"attention_tflops_per_s", attention_flops_per_s / 1e12},
        {"mfu", model_flops_per_s / (peak_tflops * 1e12)},
        {"mfu_with_attention", (model_flops_per_s + attention_flops_per_s) / (peak_tflops * 1e12)},
        {"mfu_vs_spec", model_flops_per_s / (spec_tflops * 1e12)},
        {"mfu_vs_spec_with_attention",
         (model_flops_per_s + attention_flops_per_s) / (spec_tflops * 1e12)}};
  }

  const std::vector<int64_t> pack_buckets = {512, 1024, 2048, 4096};
  ASSIGN_OR_RETURN(PackingTally packing, MeasurePacking(args, pack_steps, pack_buckets));

  BenchReport report;
  report.config = {{"threads", threads},
                   {"steps_per_round", steps},
                   {"rounds", rounds},
                   {"batch_trajectories", batch_size},
                   {"median_len", median},
                   {"train_buckets", o.buckets},
                   {"token_budget", o.token_budget},
                   {"micro_batches", packed.micro_batches.size()},
                   {"bucket", packed.bucket},
                   {"real_tokens_per_step", tokens_per_step},
                   {"capacity_tokens_per_step", packed.capacity_tokens},
                   {"loss", "truncated_is (cap 2), token mean, grad clip 1, AdamW"},
                   {"mfu_formula", "6 * parameters * real_tokens_per_s / matmul_peak_flops"},
                   {"pack_steps", pack_steps},
                   {"pack_buckets", pack_buckets},
                   {"model",
                    {{"vocab_size", m.vocab_size},
                     {"hidden_size", m.hidden_size},
                     {"num_layers", m.num_layers},
                     {"num_heads", m.num_heads},
                     {"num_kv_heads", m.num_kv_heads},
                     {"intermediate_size", m.intermediate_size},
                     {"parameters", model->NumParameters()}}}};
  report.results["flywheel"] = {{"tokens_per_s", fly_tps},
                                {"seconds", fly_s},
                                {"seconds_per_round", fly_runs},
                                {"losses_first_round", fly_losses},
                                {"first_step",
                                 {{"loss", fly_first.loss}, {"grad_norm", fly_first.grad_norm}}},
                                {"phase_seconds_per_step", PerStep(phases)},
                                {"profile", profile}};
  report.results["packing"] = {{"padding_waste", packing.waste()},
                               {"distinct_shapes", packing.shapes.size()},
                               {"real_tokens", packing.real},
                               {"capacity_tokens", packing.capacity}};
  nlohmann::json tps = {{"flywheel", fly_tps}};
  report.table = {{"variant", "tokens/s", "seconds"},
                  {"flywheel LearnerStep", fmt::format("{:.0f}", fly_tps),
                   fmt::format("{:.3f}", fly_s)}};
  std::string summary = fmt::format("flywheel {:.0f} trained tok/s", fly_tps);
  if (!py_args.empty()) {
    nlohmann::json agreement = nlohmann::json::object();
    bool all_ok = true;
    double loss_diff = 0, norm_diff = 0;
    for (const PythonRun& peer : peers) {
      const double py_s = Percentile(peer.seconds, 0.5);
      const double py_tps = trained / py_s;
      nlohmann::json& r = report.results[peer.key];
      r = peer.json;
      r["tokens_per_s"] = py_tps;
      r["seconds"] = py_s;
      r["seconds_per_round"] = peer.seconds;
      tps[peer.key] = py_tps;
      // Only a peer that computed the same step gives a ratio (the GPU arm's miss is reported).
      report.ratios[peer.ratio] = peer.ok ? nlohmann::json(fly_tps / py_tps) : nlohmann::json();
      agreement[peer.attention] = peer.Agreement();
      all_ok = all_ok && peer.ok;
      loss_diff = std::max(loss_diff, peer.loss_abs_diff);
      norm_diff = std::max(norm_diff, peer.grad_norm_abs_diff);
      report.table.push_back({peer.label, fmt::format("{:.0f}", py_tps),
                              fmt::format("{:.3f}", py_s)});
      summary += fmt::format(", {:.2f}x {}", fly_tps / py_tps, peer.label);
    }
    agreement["ok"] = all_ok;
    report.ratios["agreement"] = agreement;
    if (!report.ratios.contains("ratio_vs_python_dense")) {
      report.ratios["ratio_vs_python_dense"] = nullptr;
    }
    summary += fmt::format(" (first step {}: loss |diff| {:.1e}, grad norm |diff| {:.1e})",
                           all_ok ? "agrees" : "DISAGREES, no ratio", loss_diff, norm_diff);
  } else {
    report.results["python"] = {{"skipped", py_skipped}};
    report.ratios["ratio_vs_python"] = nullptr;
    report.ratios["ratio_vs_python_dense"] = nullptr;
    report.ratios["agreement"] = nullptr;
    std::printf("%s\n", py_skipped.c_str());
    summary += "; python skipped";
  }
  report.ratios["tokens_per_s"] = tps;
  report.ratios["matmul_peak_gflops"] = peak_gflops;
  report.ratios["mfu"] = mfu;
  report.ratios["padding_waste"] = packing.waste();
  report.ratios["distinct_shapes"] = packing.shapes.size();
  report.ratios["buckets"] = pack_buckets.size();
  report.ratios["training_padding_waste"] = packed.padding_waste();
  if (placed) {
    report.config["device"] = m.device;
    report.config["dtype"] = m.dtype;
    report.config["model"]["head_dim"] = m.HeadDim();
    report.config["model"]["qk_norm"] = m.qk_norm;
    report.config["model"]["name"] = preset;
    report.config["mfu_formula"] =
        "6 * parameters * real_tokens_per_s / (peak_tflops * 1e12); device_mfu also with the "
        "attention FLOPs and against spec_peak_tflops";
    report.ratios["device_mfu"] = device_mfu;
    report.ratios["mfu"] = device_mfu["mfu"];  // here against the device's peak, not the CPU's
    report.summary = fmt::format(
        "{}; on {} {}: MFU {:.3f} of {:.4g} TFLOP/s ({}), {:.3f} with attention, {:.3f} of the "
        "{:.4g} TFLOP/s spec",
        summary, m.device, m.dtype, device_mfu["mfu"].get<double>(),
        device_mfu["peak_tflops"].get<double>(), device_mfu["peak_source"].get<std::string>(),
        device_mfu["mfu_with_attention"].get<double>(), device_mfu["mfu_vs_spec"].get<double>(),
        device_mfu["spec_peak_tflops"].get<double>());
    return report;
  }
  report.summary = fmt::format(
      "{}; MFU {:.3f} of {:.1f} GFLOP/s peak; padding waste {:.4f}, {} shapes for {} buckets "
      "over {} steps ({} threads, {} params)",
      summary, mfu, peak_gflops, packing.waste(), packing.shapes.size(), pack_buckets.size(),
      pack_steps, threads, model->NumParameters());
  return report;
}

}  // namespace flywheel::bench
