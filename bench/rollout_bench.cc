// Generated tokens/s of the policy on the same model, prompts and thread count for
//   (a) engine:    the rollout engine (KV cache, one batched decode per step, continuous batching)
//                  with its default backend (actor.backend = "auto": it times both backends at
//                  its first step and keeps the faster; the measurement is inside the timing)
//   (a*) engine on the CPU decoder (actor.backend = "cpu") once per SIMD target this machine
//                  supports (model/simd_kernels.h: AVX2, SSE4, portable EMU128, …), so that a
//                  slow target shows on any machine (--param targets=best runs the default only)
//   (a') engine on LibTorch ops (actor.backend = "torch"), for comparison
//                  (--param torch_backend=off skips it)
//   (b) recompute: the same model recomputing the whole sequence at every step (no cache)
//   (c) python:    PyTorch (bench/rollout_python.py) with its own KV cache, fused q/k/v and
//                  gate/up projections, a RoPE table and a torch.jit.trace'd decode step
//   (c') python_eager: the same peer as plain eager PyTorch (separate projections, no trace)
//   (c*) python limited, per SIMD target other than the best, to the instructions of that
//                  target (LibTorch's CPU capability and OpenBLAS's core type, see
//                  SameIsaEnvironment): the peer a user of a machine with that target would run
// and the ratios speedup_vs_recompute = a/b, speedup_vs_python = a/c, speedup_vs_python_eager =
// a/c', speedup_vs_torch_ops = a/a', and per target speedup_vs_torch_ops_per_target = a*/a',
// speedup_vs_python_per_target = a*/c, speedup_vs_python_same_isa_per_target = a*/c*.
// --param sweep=on runs instead the engine against (c) and (c') over model sizes and thread
// counts (RunRolloutSweep).
//
// (b) grows quadratically with the generated length; by default it times `recompute_samples`
// steps spread over the whole generation and integrates the per-step time linearly between
// them (`recompute_mode: "sampled"`); --param recompute=full times every step. (c) is skipped,
// with a message, when /usr/bin/python3 has no torch. A greedy check confirms that both Python
// peers are the same model: their greedy tokens must equal the engine's.
//
// Fairness: the engine variants and the Python peers run alternately, `rounds` times each, and
// the median is reported (other work on a shared machine shifts single runs). Both use `threads`
// LibTorch threads and the same number of BLAS threads (OpenBLAS keeps its own pool, which
// otherwise spins on every core). Besides wall time, (a) and (c) report process CPU time and the
// ratio speedup_vs_python_cpu_time: on a machine shared with other work, the wall time of either
// side also counts the time other processes held the cores.

#include <algorithm>
#include <cmath>
#include <map>
#include <limits>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <torch/torch.h>

#include "absl/strings/str_join.h"
#include "bench/registry.h"
#include "flywheel/actor/rollout_engine.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/blas_threads.h"
#include "flywheel/model/safetensors.h"
#include "flywheel/model/simd_kernels.h"
#include "flywheel/model/torch_status.h"

namespace flywheel::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Setup {
  ModelOptions model;
  std::shared_ptr<const WeightSnapshot> snapshot;
  std::vector<std::vector<int64_t>> prompts;
  int64_t new_tokens = 0;
  int64_t threads = 1;
};

// Process CPU time: on a shared machine the wall time of a run also counts the time other
// processes held the cores; the CPU time does not.
double CpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Timing {
  double seconds = 0;      // wall
  double cpu_seconds = 0;  // process CPU time
  std::string backend;     // the backend the engine decoded with (auto: its choice)
};

// Generates n tokens for every prompt with the engine (decode backend `backend`).
absl::StatusOr<Timing> RunEngine(const Setup& s, const SamplingParams& sampling, int64_t n,
                                 std::vector<std::vector<int64_t>>* out,
                                 DecodeBackend backend = DecodeBackend::kAuto) {
  RolloutEngineOptions options;
  options.backend = backend;
  options.intra_op_threads = s.threads;
  options.initial_slots = static_cast<int64_t>(s.prompts.size());
  options.initial_capacity = static_cast<int64_t>(s.prompts[0].size()) + n;
  // Timed from the engine's creation (its cache allocation), as the Python peer's timing
  // includes allocating its cache.
  const auto start = Clock::now();
  const double cpu_start = CpuSeconds();
  ASSIGN_OR_RETURN(auto engine, RolloutEngine::Create(options, s.snapshot));
  std::vector<SequenceId> ids;
  for (size_t i = 0; i < s.prompts.size(); ++i) {
    ASSIGN_OR_RETURN(SequenceId id, engine->AddSequence(s.prompts[i], {sampling, 1000 + i}));
    RETURN_IF_ERROR(engine->StartTurn(id, {n, {}}));
    ids.push_back(id);
  }
  while (engine->num_generating() > 0) RETURN_IF_ERROR(engine->Step().status());
  const Timing timing{SecondsSince(start), CpuSeconds() - cpu_start,
                      engine->backend() == DecodeBackend::kCpu ? "cpu" : "torch"};
  if (out != nullptr) {
    for (SequenceId id : ids) {
      ASSIGN_OR_RETURN(auto tokens, engine->Tokens(id));
      out->emplace_back(tokens.end() - n, tokens.end());
    }
  }
  return timing;
}

// One recompute step: the whole [B, L] sequence through the model, sample the next tokens.
void RecomputeStep(const Setup& s, torch::Tensor& tokens, std::vector<std::mt19937_64>& rngs) {
  const int64_t b = tokens.size(0);
  const int64_t l = tokens.size(1);
  const auto layout = CausalLayout(b, l);
  const auto& model = s.snapshot->model;
  const auto hidden = model->Hidden(tokens, layout.positions, layout.allowed, nullptr);
  const auto probs =
      SamplingLogProbs(model->Logits(hidden.select(1, l - 1)), SamplingParams{}).exp().contiguous();
  std::vector<int64_t> next(b);
  for (int64_t i = 0; i < b; ++i) {
    next[i] = DrawToken(probs.data_ptr<float>() + i * probs.size(1), probs.size(1), rngs[i]);
  }
  tokens = torch::cat({tokens, torch::tensor(next, torch::kInt64).unsqueeze(1)}, 1);
}

// Seconds for the whole generation without a cache: timed at `samples` lengths spread over the
// run and integrated linearly between them, or every step when samples <= 0.
double RunRecompute(const Setup& s, int64_t samples) {
  c10::InferenceMode guard;
  at::set_num_threads(static_cast<int>(s.threads));
  const int64_t b = static_cast<int64_t>(s.prompts.size());
  const int64_t p = static_cast<int64_t>(s.prompts[0].size());
  std::vector<int64_t> flat;
  for (const auto& prompt : s.prompts) flat.insert(flat.end(), prompt.begin(), prompt.end());
  std::vector<std::mt19937_64> rngs;
  for (int64_t i = 0; i < b; ++i) rngs.emplace_back(1000 + i);
  auto prompts = torch::tensor(flat, torch::kInt64).view({b, p});
  if (samples <= 0 || samples >= s.new_tokens) {
    auto tokens = prompts.clone();
    const auto start = Clock::now();
    for (int64_t i = 0; i < s.new_tokens; ++i) RecomputeStep(s, tokens, rngs);
    return SecondsSince(start);
  }
  // Step i runs on p + i tokens; time steps at evenly spaced i (random token contents: the cost
  // does not depend on them).
  std::vector<std::pair<double, double>> points;  // (step index, seconds)
  for (int64_t k = 0; k < samples; ++k) {
    const int64_t i = k * (s.new_tokens - 1) / (samples - 1);
    auto tokens =
        torch::cat({prompts, torch::randint(s.model.vocab_size, {b, i}, torch::kInt64)}, 1);
    const auto start = Clock::now();
    RecomputeStep(s, tokens, rngs);
    points.push_back({static_cast<double>(i), SecondsSince(start)});
  }
  double total = 0;
  for (size_t k = 0; k + 1 < points.size(); ++k) {
    const auto [i0, t0] = points[k];
    const auto [i1, t1] = points[k + 1];
    total += (t0 + t1) / 2 * (i1 - i0);  // trapezoid over the steps between two samples
  }
  return total + points.back().second;  // the last step itself
}

struct PythonResult {
  bool ran = false;
  std::string skipped;
  nlohmann::json json;
};

// The Python peer as it runs on a CPU whose best instructions are those of a SIMD target: on an
// SSE4-only machine LibTorch's own kernels run their non-AVX code and OpenBLAS its Nehalem
// kernels, so a decoder target is compared with the peer a user of that machine would have.
// LibTorch's CPU capability and OpenBLAS's core type are both chosen per process at load time
// (ATEN_CPU_CAPABILITY, OPENBLAS_CORETYPE), which is why only the subprocess peer can be matched.
// Empty for the machine's own best target (the peer runs as it is).
std::string SameIsaEnvironment(const std::string& target, bool best) {
  if (best) return "";
  if (target.rfind("AVX3", 0) == 0) return "OPENBLAS_CORETYPE=SkylakeX";
  if (target == "AVX2") return "ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell";
  if (target == "SSE4") return "ATEN_CPU_CAPABILITY=default OPENBLAS_CORETYPE=Nehalem";
  return "ATEN_CPU_CAPABILITY=default OPENBLAS_CORETYPE=Core2";  // SCALAR / EMU128: pre-SSE4.1
}

// The peer's weights and specs on disk, written once per model (a large model's weights take
// seconds to write) and removed with this object.
class PeerFiles {
 public:
  static absl::StatusOr<std::unique_ptr<PeerFiles>> Write(const Setup& s) {
    auto files = std::unique_ptr<PeerFiles>(new PeerFiles(
        std::filesystem::temp_directory_path() / StrCat("flywheel_rollout_bench_", ::getpid())));
    std::filesystem::create_directories(files->dir_);
    RETURN_IF_ERROR(SaveStateDict(files->weights(), *s.snapshot->model));
    return files;
  }
  ~PeerFiles() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string weights() const { return (dir_ / "weights.safetensors").string(); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  explicit PeerFiles(std::filesystem::path dir) : dir_(std::move(dir)) {}
  std::filesystem::path dir_;
};

// `variant`: "traced" (fused projections, RoPE table, torch.jit.trace'd decode step: the
// strongest peer) or "eager" (the plain eager implementation); see bench/rollout_python.py.
// `batch` prompts of `prompt_len` random tokens, the same for a given model (seeded).
void AddRandomPrompts(Setup& s, int64_t batch, int64_t prompt_len) {
  std::mt19937_64 rng(7);
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<int64_t> prompt(prompt_len);
    for (auto& t : prompt) t = static_cast<int64_t>(rng() % s.model.vocab_size);
    s.prompts.push_back(prompt);
  }
}

// The engine's greedy tokens (top_k 1) for the first two prompts, `check` tokens each: what
// both Python peers must reproduce to count as the same model.
absl::StatusOr<std::vector<std::vector<int64_t>>> GreedyReference(const Setup& s, int64_t check) {
  std::vector<std::vector<int64_t>> greedy;
  SamplingParams greedy_params;
  greedy_params.top_k = 1;
  Setup two = s;
  two.prompts.resize(std::min<size_t>(2, s.prompts.size()));
  RETURN_IF_ERROR(RunEngine(two, greedy_params, check, &greedy).status());
  return greedy;
}

absl::StatusOr<PythonResult> RunPython(const Setup& s, const BenchArgs& args, int64_t check,
                                       const PeerFiles& files, const std::string& variant,
                                       const std::string& environment = "") {
  PythonResult result;
  result.skipped = PythonPeerSkipReason();
  if (!result.skipped.empty()) return result;
  const std::string spec_path = files.path("spec.json");
  const std::string out_path = files.path("out.json");
  nlohmann::json spec = {{"model",
                          {{"hidden_size", s.model.hidden_size},
                           {"num_layers", s.model.num_layers},
                           {"num_heads", s.model.num_heads},
                           {"num_kv_heads", s.model.num_kv_heads},
                           {"rope_theta", s.model.rope_theta},
                           {"rms_norm_eps", s.model.rms_norm_eps}}},
                         {"prompts", s.prompts},
                         {"new_tokens", s.new_tokens},
                         {"threads", s.threads},
                         {"greedy_check_tokens", check},
                         {"variant", variant}};
  std::ofstream(spec_path) << spec.dump();
  // LibTorch's OpenMP threads spin after each parallel region by default and then contend with
  // OpenBLAS's own threads for the cores: at 2 threads (hidden 512, 2 layers, batch 32) the
  // traced peer ran at 1218 tok/s as it was and 4368 with passive waiting (1-thread: 2825 / 3282).
  // The peer gets the better setting; with one thread it changes nothing.
  ASSIGN_OR_RETURN(result.json,
                   RunPythonPeer(args, "bench/rollout_python.py",
                                 StrCat("--weights '", files.weights(), "' --spec '", spec_path,
                                        "'"),
                                 s.threads, out_path,
                                 StrCat(environment, environment.empty() ? "" : " ",
                                        "OMP_WAIT_POLICY=PASSIVE")));
  result.ran = true;
  return result;
}

// --param sweep=on: the engine against both Python peers over model sizes and thread counts.
//
// Sizes: hidden in `sweep_hidden` (128,512,1024) × layers in `sweep_layers` (2,8), each at every
// thread count in `sweep_threads` (1,2). The shape follows the hidden size as Llama's do: head dim
// 64, half as many kv heads as heads, SwiGLU intermediate 8/3 × hidden rounded to a multiple of
// 64 (Touvron et al. 2023, after Shazeer 2020). Per case the engine (on the backend `auto` chose),
// the traced peer and the eager peer run `rounds` times in turn, the first of them rotating from
// round to round, and medians are reported. A large model's step costs tens of times a small
// one's, so new_tokens defaults per hidden size (256 up to 128, 64 up to 512, 32 beyond) to keep
// the whole sweep within minutes; --param new_tokens=N sets it for every case.
struct SweepCase {
  int64_t hidden = 0, layers = 0, threads = 0, new_tokens = 0;
};

ModelOptions SweepModel(int64_t hidden, int64_t layers, int64_t vocab) {
  ModelOptions m;
  m.vocab_size = vocab;
  m.hidden_size = hidden;
  m.num_layers = layers;
  m.num_heads = std::max<int64_t>(1, hidden / 64);
  m.num_kv_heads = std::max<int64_t>(1, m.num_heads / 2);
  m.intermediate_size = std::max<int64_t>(64, (8 * hidden / 3 + 32) / 64 * 64);
  m.seed = 1;
  return m;
}

double GeometricMean(const std::vector<double>& v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  double log_sum = 0;
  for (double x : v) log_sum += std::log(x);
  return std::exp(log_sum / static_cast<double>(v.size()));
}

// One case of the sweep: its row of the `sweep` list.
absl::StatusOr<nlohmann::json> RunSweepCase(const BenchArgs& args, const SweepCase& c,
                                            int64_t vocab, int64_t batch, int64_t prompt_len,
                                            int64_t rounds, bool run_python) {
  Setup s;
  s.model = SweepModel(c.hidden, c.layers, vocab);
  s.model.max_seq_len = std::max<int64_t>(1024, prompt_len + c.new_tokens);
  s.new_tokens = c.new_tokens;
  s.threads = c.threads;
  RETURN_IF_ERROR(s.model.Validate());
  (void)SetBlasThreads(static_cast<int>(s.threads));  // no-op where the BLAS is not OpenBLAS
  ASSIGN_OR_RETURN(Transformer model, MakeTransformer(s.model));
  ASSIGN_OR_RETURN(s.snapshot, MakeSnapshot(model, 1));
  AddRandomPrompts(s, batch, prompt_len);
  const int64_t generated = batch * s.new_tokens;
  const int64_t check = std::min<int64_t>(8, s.new_tokens);
  ASSIGN_OR_RETURN(const std::vector<std::vector<int64_t>> greedy, GreedyReference(s, check));
  // Warm-up, with the default backend `auto`; the timed rounds then run the backend it chose.
  // Its choice is a one-time cost of an engine's life (a prefill and 8 decode steps on each
  // backend) that a long-lived engine amortises but a 32-token round of a large model does not
  // (at hidden 512 it was half the round), just as the peer's tracing is not in its timing.
  ASSIGN_OR_RETURN(const Timing warm, RunEngine(s, {}, 4, nullptr));
  const DecodeBackend backend = warm.backend == "cpu" ? DecodeBackend::kCpu : DecodeBackend::kTorch;
  std::unique_ptr<PeerFiles> files;
  if (run_python) {
    ASSIGN_OR_RETURN(files, PeerFiles::Write(s));
  }

  std::vector<double> engine_runs, engine_cpu, traced_runs, traced_cpu, eager_runs;
  PythonResult traced, eager;
  for (int64_t r = 0; r < rounds; ++r) {
    for (int64_t k = 0; k < 3; ++k) {
      switch ((r + k) % 3) {  // engine, traced, eager; the first rotates with the round
        case 0: {
          ASSIGN_OR_RETURN(const Timing t, RunEngine(s, {}, s.new_tokens, nullptr, backend));
          engine_runs.push_back(t.seconds);
          engine_cpu.push_back(t.cpu_seconds);
          break;
        }
        case 1: {
          if (!run_python) break;
          ASSIGN_OR_RETURN(traced, RunPython(s, args, check, *files, "traced"));
          traced_runs.push_back(traced.json["seconds"].get<double>());
          traced_cpu.push_back(traced.json["cpu_seconds"].get<double>());
          break;
        }
        case 2: {
          if (!run_python) break;
          ASSIGN_OR_RETURN(eager, RunPython(s, args, check, *files, "eager"));
          eager_runs.push_back(eager.json["seconds"].get<double>());
          break;
        }
      }
    }
  }
  const double engine_tps = generated / Median(engine_runs);
  nlohmann::json row = {{"hidden", c.hidden},
                        {"layers", c.layers},
                        {"heads", s.model.num_heads},
                        {"kv_heads", s.model.num_kv_heads},
                        {"intermediate", s.model.intermediate_size},
                        {"parameters", model->NumParameters()},
                        {"threads", c.threads},
                        {"new_tokens", c.new_tokens},
                        {"engine_tokens_per_s", engine_tps},
                        {"engine_backend", warm.backend},  // auto's choice, timed alone
                        {"engine_seconds_per_round", engine_runs},
                        {"engine_cpu_seconds_per_round", engine_cpu}};
  if (!run_python) {
    row["speedup_vs_python"] = nullptr;
    row["speedup_vs_python_eager"] = nullptr;
    return row;
  }
  const double traced_tps = generated / Median(traced_runs);
  const double eager_tps = generated / Median(eager_runs);
  row["python_tokens_per_s"] = traced_tps;
  row["python_eager_tokens_per_s"] = eager_tps;
  row["speedup_vs_python"] = engine_tps / traced_tps;
  row["speedup_vs_python_eager"] = engine_tps / eager_tps;
  // CPU time: robust to other processes on a shared machine (at 2 threads it also counts the
  // second core's work, so a side that uses it shows higher CPU time than wall time).
  row["speedup_vs_python_cpu_time"] = Median(traced_cpu) / Median(engine_cpu);
  row["python_seconds_per_round"] = traced_runs;
  row["python_cpu_seconds_per_round"] = traced_cpu;
  row["python_eager_seconds_per_round"] = eager_runs;
  row["greedy_matches_engine"] = traced.json["greedy_tokens"] == nlohmann::json(greedy);
  row["eager_greedy_matches_engine"] = eager.json["greedy_tokens"] == nlohmann::json(greedy);
  row["traced_matches_eager"] = traced.json.value("traced_matches_eager", false);
  return row;
}

absl::StatusOr<BenchReport> RunRolloutSweep(const BenchArgs& args) {
  ASSIGN_OR_RETURN(const auto hiddens,
                   ParseIntList(args, "sweep_hidden", args.quick ? "128,512" : "128,512,1024"));
  ASSIGN_OR_RETURN(const auto layer_counts,
                   ParseIntList(args, "sweep_layers", args.quick ? "1" : "2,8"));
  ASSIGN_OR_RETURN(const auto thread_counts,
                   ParseIntList(args, "sweep_threads", args.quick ? "1" : "1,2"));
  const int64_t vocab = args.GetInt("vocab", 512);
  const int64_t batch = args.GetInt("batch", args.quick ? 4 : 32);
  const int64_t prompt_len = args.GetInt("prompt", args.quick ? 8 : 32);
  const int64_t rounds = std::max<int64_t>(1, args.GetInt("rounds", args.quick ? 1 : 3));
  if (batch <= 0 || prompt_len <= 0) {
    return absl::InvalidArgumentError("rollout bench: batch and prompt must be > 0");
  }
  std::string skipped = PythonPeerSkipReason();
  if (args.GetString("python", "on") == "off") skipped = "python variant off (--param python=off)";
  if (!skipped.empty()) std::printf("%s\n", skipped.c_str());

  BenchReport report;
  report.table = {{"hidden", "layers", "threads", "new tokens", "engine tok/s (backend)",
                   "python traced", "python eager", "vs traced", "vs eager"}};
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> ge_512, eager_ge_512;
  std::map<int64_t, std::vector<double>> ge_512_by_threads;
  bool all_greedy_match = true;
  for (int64_t hidden : hiddens) {
    const int64_t default_new = hidden <= 128 ? 256 : hidden <= 512 ? 64 : 32;
    const int64_t new_tokens = args.GetInt("new_tokens", args.quick ? 8 : default_new);
    if (new_tokens < 2) return absl::InvalidArgumentError("rollout bench: new_tokens must be >= 2");
    for (int64_t layers : layer_counts) {
      for (int64_t threads : thread_counts) {
        ASSIGN_OR_RETURN(nlohmann::json row,
                         RunSweepCase(args, {hidden, layers, threads, new_tokens}, vocab, batch,
                                      prompt_len, rounds, skipped.empty()));
        const bool ran_python = skipped.empty();
        std::vector<std::string> line = {
            std::to_string(hidden), std::to_string(layers), std::to_string(threads),
            std::to_string(new_tokens),
            fmt::format("{:.0f} ({})", row["engine_tokens_per_s"].get<double>(),
                        row["engine_backend"].get<std::string>())};
        if (ran_python) {
          const double vs = row["speedup_vs_python"].get<double>();
          const double vs_eager = row["speedup_vs_python_eager"].get<double>();
          if (hidden >= 512) {
            ge_512.push_back(vs);
            eager_ge_512.push_back(vs_eager);
            ge_512_by_threads[threads].push_back(vs);
          }
          all_greedy_match = all_greedy_match && row["greedy_matches_engine"].get<bool>() &&
                             row["eager_greedy_matches_engine"].get<bool>() &&
                             row["traced_matches_eager"].get<bool>();
          line.push_back(fmt::format("{:.0f}", row["python_tokens_per_s"].get<double>()));
          line.push_back(fmt::format("{:.0f}", row["python_eager_tokens_per_s"].get<double>()));
          line.push_back(fmt::format("{:.2f}x", vs));
          line.push_back(fmt::format("{:.2f}x", vs_eager));
        }
        std::printf("sweep: %s\n", absl::StrJoin(line, " | ").c_str());
        std::fflush(stdout);
        report.table.push_back(std::move(line));
        rows.push_back(std::move(row));
      }
    }
  }
  report.config = {{"mode", "sweep"},
                   {"sweep_hidden", hiddens},
                   {"sweep_layers", layer_counts},
                   {"sweep_threads", thread_counts},
                   {"vocab_size", vocab},
                   {"batch_size", batch},
                   {"prompt_tokens", prompt_len},
                   {"rounds", rounds},
                   {"sampling", "temperature 1, no truncation"},
                   {"engine_backend", "the one auto chose in each case's warm-up"},
                   {"shape", "head dim 64, kv heads = heads / 2, intermediate 8/3 x hidden "
                             "rounded to a multiple of 64"}};
  report.results["sweep"] = rows;
  report.ratios["sweep"] = rows;
  auto finite_or_null = [](double x) -> nlohmann::json {
    return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
  };
  const double geo = GeometricMean(ge_512);
  report.ratios["speedup_vs_python_geomean_hidden_ge_512"] = finite_or_null(geo);
  report.ratios["speedup_vs_python_eager_geomean_hidden_ge_512"] =
      finite_or_null(GeometricMean(eager_ge_512));
  nlohmann::json by_threads = nlohmann::json::object();
  for (const auto& [threads, v] : ge_512_by_threads) {
    by_threads[std::to_string(threads)] = finite_or_null(GeometricMean(v));
  }
  report.ratios["speedup_vs_python_geomean_hidden_ge_512_by_threads"] = by_threads;
  report.ratios["greedy_matches_engine_all_cases"] =
      skipped.empty() ? nlohmann::json(all_greedy_match) : nlohmann::json(nullptr);
  if (!skipped.empty()) report.results["python"] = {{"skipped", skipped}};
  report.summary =
      skipped.empty()
          ? fmt::format("sweep of {} cases: engine vs python traced, geometric mean over hidden "
                        ">= 512: {:.2f}x (vs eager {:.2f}x){}",
                        rows.size(), geo, GeometricMean(eager_ge_512),
                        all_greedy_match ? "" : " (WARNING: some greedy tokens differ)")
          : fmt::format("sweep of {} cases: engine only; python skipped", rows.size());
  return report;
}

}  // namespace

absl::StatusOr<BenchReport> RunRolloutBench(const BenchArgs& args) {
  if (args.GetString("sweep", "off") == "on") return RunRolloutSweep(args);
  Setup s;
  s.model.vocab_size = args.GetInt("vocab", 512);
  s.model.hidden_size = args.GetInt("hidden", 128);
  s.model.num_layers = args.GetInt("layers", 2);
  s.model.num_heads = args.GetInt("heads", 4);
  s.model.num_kv_heads = args.GetInt("kv_heads", 2);
  s.model.intermediate_size = args.GetInt("intermediate", 344);
  s.model.seed = 1;
  const int64_t batch = args.GetInt("batch", args.quick ? 4 : 32);
  const int64_t prompt_len = args.GetInt("prompt", args.quick ? 8 : 32);
  s.new_tokens = args.GetInt("new_tokens", args.quick ? 16 : 512);
  s.threads = args.GetInt("threads", 1);
  const std::string recompute_mode = args.GetString("recompute", "sampled");  // sampled|full|off
  const bool full_recompute = recompute_mode == "full";
  const int64_t samples = full_recompute ? 0 : args.GetInt("recompute_samples", 9);
  const bool run_python = args.GetString("python", "on") != "off";
  const int64_t rounds = std::max<int64_t>(1, args.GetInt("rounds", args.quick ? 1 : 3));
  s.model.max_seq_len = std::max<int64_t>(1024, prompt_len + s.new_tokens);
  RETURN_IF_ERROR(s.model.Validate());
  if (batch <= 0 || prompt_len <= 0 || s.new_tokens < 2 || s.threads <= 0) {
    return absl::InvalidArgumentError(
        "rollout bench: batch, prompt, threads must be > 0 and new_tokens >= 2");
  }
  (void)SetBlasThreads(static_cast<int>(s.threads));  // no-op where the BLAS is not OpenBLAS
  ASSIGN_OR_RETURN(Transformer model, MakeTransformer(s.model));
  ASSIGN_OR_RETURN(s.snapshot, MakeSnapshot(model, 1));
  AddRandomPrompts(s, batch, prompt_len);
  const int64_t generated = batch * s.new_tokens;

  // (a) engine, after a short warm-up; greedy tokens for the Python cross-check.
  const int64_t check = std::min<int64_t>(8, s.new_tokens);
  ASSIGN_OR_RETURN(const std::vector<std::vector<int64_t>> greedy, GreedyReference(s, check));
  const bool run_torch = args.GetString("torch_backend", "on") != "off";
  std::vector<int64_t> targets = simd::SupportedTargets();
  if (args.GetString("targets", "all") == "best") targets.resize(1);
  RETURN_IF_ERROR(RunEngine(s, {}, 4, nullptr).status());
  for (int64_t target : targets) {
    simd::ScopedTarget scoped(target);
    RETURN_IF_ERROR(RunEngine(s, {}, 4, nullptr, DecodeBackend::kCpu).status());
  }
  if (run_torch) RETURN_IF_ERROR(RunEngine(s, {}, 4, nullptr, DecodeBackend::kTorch).status());

  // (a), (a*), (a') and (c) alternate, `rounds` times each.
  std::vector<double> engine_runs, python_runs, engine_cpu, python_cpu, torch_runs;
  std::vector<std::vector<double>> target_runs(targets.size());
  std::vector<std::vector<double>> same_isa_python_runs(targets.size());
  std::vector<std::string> same_isa_env(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    same_isa_env[i] = SameIsaEnvironment(simd::TargetName(targets[i]), targets[i] == targets[0]);
  }
  std::string auto_choice;
  PythonResult py, py_eager;
  std::vector<double> eager_runs, eager_cpu;
  if (!run_python) py.skipped = "python variant off (--param python=off)";
  std::unique_ptr<PeerFiles> peer_files;
  if (run_python && PythonPeerSkipReason().empty()) {
    ASSIGN_OR_RETURN(peer_files, PeerFiles::Write(s));
  }
  for (int64_t r = 0; r < rounds; ++r) {
    ASSIGN_OR_RETURN(const Timing t, RunEngine(s, {}, s.new_tokens, nullptr));
    engine_runs.push_back(t.seconds);
    engine_cpu.push_back(t.cpu_seconds);
    auto_choice = t.backend;
    for (size_t i = 0; i < targets.size(); ++i) {
      simd::ScopedTarget scoped(targets[i]);
      ASSIGN_OR_RETURN(const Timing tt,
                       RunEngine(s, {}, s.new_tokens, nullptr, DecodeBackend::kCpu));
      target_runs[i].push_back(tt.seconds);
    }
    if (run_torch) {
      ASSIGN_OR_RETURN(const Timing tt,
                       RunEngine(s, {}, s.new_tokens, nullptr, DecodeBackend::kTorch));
      torch_runs.push_back(tt.seconds);
    }
    if (run_python && py.skipped.empty()) {
      ASSIGN_OR_RETURN(py, RunPython(s, args, check, *peer_files, "traced"));
      if (py.ran) {
        python_runs.push_back(py.json["seconds"].get<double>());
        python_cpu.push_back(py.json["cpu_seconds"].get<double>());
        ASSIGN_OR_RETURN(py_eager, RunPython(s, args, check, *peer_files, "eager"));
        eager_runs.push_back(py_eager.json["seconds"].get<double>());
        eager_cpu.push_back(py_eager.json["cpu_seconds"].get<double>());
        for (size_t i = 0; i < targets.size(); ++i) {
          if (same_isa_env[i].empty()) {
            same_isa_python_runs[i].push_back(python_runs.back());
            continue;
          }
          ASSIGN_OR_RETURN(
              const PythonResult matched,
              RunPython(s, args, check, *peer_files, "traced", same_isa_env[i]));
          same_isa_python_runs[i].push_back(matched.json["seconds"].get<double>());
        }
      }
    }
  }
  const double engine_s = Median(engine_runs);
  const double engine_tps = generated / engine_s;
  const double engine_cpu_tps = generated / Median(engine_cpu);
  const double torch_tps = run_torch ? generated / Median(torch_runs) : 0;
  const double py_tps = python_runs.empty() ? 0 : generated / Median(python_runs);

  // (b) recompute.
  double recompute_s = std::numeric_limits<double>::infinity();
  if (recompute_mode != "off") {
    RETURN_IF_ERROR(
        TorchCall("recompute variant", [&] { recompute_s = RunRecompute(s, samples); }));
  }
  const double recompute_tps = generated / recompute_s;

  BenchReport report;
  report.config = {{"batch_size", batch},
                   {"prompt_tokens", prompt_len},
                   {"new_tokens", s.new_tokens},
                   {"threads", s.threads},
                   {"rounds", rounds},
                   {"sampling", "temperature 1, no truncation"},
                   {"recompute_mode", recompute_mode},
                   {"recompute_samples", samples},
                   {"model",
                    {{"vocab_size", s.model.vocab_size},
                     {"hidden_size", s.model.hidden_size},
                     {"num_layers", s.model.num_layers},
                     {"num_heads", s.model.num_heads},
                     {"num_kv_heads", s.model.num_kv_heads},
                     {"intermediate_size", s.model.intermediate_size},
                     {"parameters", model->NumParameters()}}}};
  report.results["engine"] = {{"tokens_per_s", engine_tps},
                              {"seconds", engine_s},
                              {"seconds_per_round", engine_runs},
                              {"cpu_tokens_per_s", engine_cpu_tps},
                              {"cpu_seconds_per_round", engine_cpu},
                              {"backend", "auto"},
                              {"auto_choice", auto_choice}};
  report.results["recompute"] = {{"tokens_per_s", recompute_tps}, {"seconds", recompute_s}};
  nlohmann::json tps = {{"engine", engine_tps}, {"recompute", recompute_tps}};
  report.table = {{"variant", "tokens/s", "seconds"},
                  {"engine (KV cache, batched; backend auto -> " + auto_choice + ")",
                   fmt::format("{:.0f}", engine_tps), fmt::format("{:.2f}", engine_s)}};
  // (a*) per SIMD target, with its ratios to the LibTorch-ops engine and to eager Python.
  nlohmann::json per_target = nlohmann::json::object(), vs_torch = nlohmann::json::object(),
                 vs_python = nlohmann::json::object(), vs_same_isa = nlohmann::json::object();
  double min_vs_torch = std::numeric_limits<double>::infinity(), min_vs_python = min_vs_torch;
  double min_vs_same_isa = min_vs_torch;
  for (size_t i = 0; i < targets.size(); ++i) {
    const std::string name = simd::TargetName(targets[i]);
    const double t_s = Median(target_runs[i]);
    const double t_tps = generated / t_s;
    per_target[name] = {{"tokens_per_s", t_tps},
                        {"seconds", t_s},
                        {"seconds_per_round", target_runs[i]},
                        {"default", i == 0}};
    tps["engine_cpu_" + name] = t_tps;
    std::string ratios;
    if (run_torch) {
      vs_torch[name] = t_tps / torch_tps;
      min_vs_torch = std::min(min_vs_torch, t_tps / torch_tps);
      ratios += fmt::format("{:.2f}x torch ops", t_tps / torch_tps);
    }
    if (py_tps > 0) {
      vs_python[name] = t_tps / py_tps;
      min_vs_python = std::min(min_vs_python, t_tps / py_tps);
      ratios += fmt::format("{}{:.2f}x python", ratios.empty() ? "" : ", ", t_tps / py_tps);
    }
    if (!same_isa_python_runs[i].empty()) {
      const double peer_tps = generated / Median(same_isa_python_runs[i]);
      per_target[name]["python_same_isa"] = {
          {"tokens_per_s", peer_tps},
          {"environment", same_isa_env[i].empty() ? "as it is" : same_isa_env[i]},
          {"seconds_per_round", same_isa_python_runs[i]}};
      vs_same_isa[name] = t_tps / peer_tps;
      min_vs_same_isa = std::min(min_vs_same_isa, t_tps / peer_tps);
      ratios += fmt::format(", {:.2f}x python on {}", t_tps / peer_tps, name);
    }
    report.table.push_back(
        {fmt::format("engine, CPU decoder on {}{} ({})", name, i == 0 ? ", default" : "", ratios),
         fmt::format("{:.0f}", t_tps), fmt::format("{:.2f}", t_s)});
  }
  // Where a target's decoder is slower than LibTorch ops, the engine's `auto` must notice: run it
  // once under that target and record what it chose (a user on such a CPU gets that engine).
  for (size_t i = 0; i < targets.size() && run_torch; ++i) {
    const std::string name = simd::TargetName(targets[i]);
    if (per_target[name]["tokens_per_s"].get<double>() >= torch_tps) continue;
    simd::ScopedTarget scoped(targets[i]);
    ASSIGN_OR_RETURN(const Timing t, RunEngine(s, {}, s.new_tokens, nullptr));
    per_target[name]["auto"] = {{"chose", t.backend}, {"tokens_per_s", generated / t.seconds}};
    report.table.push_back(
        {fmt::format("engine, backend auto under {} (chose {})", name, t.backend),
         fmt::format("{:.0f}", generated / t.seconds), fmt::format("{:.2f}", t.seconds)});
  }
  report.results["engine_cpu_targets"] = per_target;
  report.config["simd_targets_compiled"] = simd::CompiledTargetNames();
  report.config["simd_targets_run"] = per_target.size();
  if (run_torch) {
    report.results["engine_torch_ops"] = {{"tokens_per_s", torch_tps},
                                          {"seconds", generated / torch_tps},
                                          {"seconds_per_round", torch_runs}};
    tps["engine_torch_ops"] = torch_tps;
    report.table.push_back({"engine on LibTorch ops", fmt::format("{:.0f}", torch_tps),
                            fmt::format("{:.2f}", generated / torch_tps)});
    report.ratios["speedup_vs_torch_ops"] = engine_tps / torch_tps;
    report.ratios["speedup_vs_torch_ops_per_target"] = vs_torch;
    report.ratios["min_speedup_vs_torch_ops_over_targets"] = min_vs_torch;
  } else {
    report.ratios["speedup_vs_torch_ops"] = nullptr;
  }
  report.table.push_back({full_recompute ? "recompute (full)" : "recompute (sampled steps)",
                          fmt::format("{:.0f}", recompute_tps),
                          fmt::format("{:.2f}", recompute_s)});
  report.ratios["speedup_vs_recompute"] = engine_tps / recompute_tps;
  std::string summary = fmt::format("engine {:.0f} tok/s; {:.1f}x vs recompute", engine_tps,
                                    engine_tps / recompute_tps);
  if (run_torch) {
    summary += fmt::format(", {:.2f}x vs LibTorch ops (slowest SIMD target {:.2f}x)",
                           engine_tps / torch_tps, min_vs_torch);
  }
  if (py.ran) {
    // A peer's results: the last round's output, plus its medians and the greedy check.
    auto record_peer = [&](const std::string& key, const nlohmann::json& out,
                           const std::vector<double>& runs, const std::vector<double>& cpu) {
      nlohmann::json& r = report.results[key];
      r = out;
      r["tokens_per_s"] = generated / Median(runs);
      r["seconds"] = Median(runs);
      r["seconds_per_round"] = runs;
      r["greedy_matches_engine"] = out["greedy_tokens"] == nlohmann::json(greedy);
      r["cpu_tokens_per_s"] = generated / Median(cpu);
      r["cpu_seconds_per_round"] = cpu;
      return r["greedy_matches_engine"].get<bool>();
    };
    const double py_s = Median(python_runs);
    const bool same = record_peer("python", py.json, python_runs, python_cpu);
    tps["python"] = py_tps;
    report.ratios["speedup_vs_python"] = engine_tps / py_tps;
    report.ratios["speedup_vs_python_per_target"] = vs_python;
    report.ratios["min_speedup_vs_python_over_targets"] = min_vs_python;
    // Each target against the peer limited to the same instructions (SameIsaEnvironment).
    report.ratios["speedup_vs_python_same_isa_per_target"] = vs_same_isa;
    report.ratios["min_speedup_vs_python_same_isa_over_targets"] = min_vs_same_isa;
    // The same ratio in CPU time: robust to other processes on a shared machine.
    report.ratios["speedup_vs_python_cpu_time"] = engine_cpu_tps / (generated / Median(python_cpu));
    report.table.push_back({"python traced (fused projections, RoPE table, jit.trace'd step)",
                            fmt::format("{:.0f}", py_tps), fmt::format("{:.2f}", py_s)});
    // The plain eager peer, for continuity with earlier figures (speedup_vs_python was against it
    // before the traced peer existed).
    const double eager_s = Median(eager_runs);
    const double eager_tps = generated / eager_s;
    const bool eager_same = record_peer("python_eager", py_eager.json, eager_runs, eager_cpu);
    tps["python_eager"] = eager_tps;
    report.ratios["speedup_vs_python_eager"] = engine_tps / eager_tps;
    report.ratios["speedup_vs_python_eager_cpu_time"] =
        engine_cpu_tps / (generated / Median(eager_cpu));
    report.table.push_back({"python eager (KV cache)", fmt::format("{:.0f}", eager_tps),
                            fmt::format("{:.2f}", eager_s)});
    summary += fmt::format(
        ", {:.2f}x vs python traced ({:.2f}x in CPU time), {:.2f}x vs python eager{}",
        engine_tps / py_tps, report.ratios["speedup_vs_python_cpu_time"].get<double>(),
        engine_tps / eager_tps,
        same && eager_same ? "" : " (WARNING: python greedy tokens differ from the engine's)");
  } else {
    report.results["python"] = {{"skipped", py.skipped}};
    report.ratios["speedup_vs_python"] = nullptr;
    report.ratios["speedup_vs_python_cpu_time"] = nullptr;
    report.ratios["speedup_vs_python_eager"] = nullptr;
    std::printf("%s\n", py.skipped.c_str());
    summary += "; python skipped";
  }
  report.ratios["tokens_per_s"] = tps;
  report.ratios["model_parameters"] = model->NumParameters();
  report.ratios["batch_size"] = batch;
  report.ratios["threads"] = s.threads;
  report.summary = fmt::format("{} (batch {}, {} new tokens, {} threads, {} params)", summary,
                               batch, s.new_tokens, s.threads, model->NumParameters());
  return report;
}

}  // namespace flywheel::bench
