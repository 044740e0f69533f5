// `flywheel bench rollout-gpu`: generated tokens/s of the rollout engine on a GPU against Hugging
// Face transformers' `generate` with a static cache, on the same weights, prompts and device.
//
//   engine         RolloutEngine on the LibTorch backend (actor.backend = "torch"), the snapshot on
//                  model.device in model.dtype (MakeSnapshot), greedy (top_k 1), no stop token;
//                  decode steps as CUDA graphs (--param decode_graphs=auto|on|off, auto: on a
//                  GPU), captured inside the timed run
//   hf_generate    bench/rollout_hf.py: AutoModelForCausalLM (sdpa attention) loaded from the
//                  Hugging Face directory this bench exports (ExportHfModelDirectory, in
//                  model.dtype: the snapshot's weights exactly), model.generate(max_new_tokens =
//                  min_new_tokens = N, do_sample=False, cache_implementation="static")
//
// The model is Qwen3-0.6B-shaped with random weights (--param model=qwen3-0.6b, the default:
// vocab 151936, hidden 1024, 28 layers, 16 heads of 128, 8 kv heads, intermediate 3072, q/k norms,
// tied embeddings) or a tiny one of the same family (--param model=tiny) for CPU smoke runs.
// Every row of a batch has `prompt` random tokens and generates exactly `new_tokens` tokens on
// both sides, so tokens/s = batch · new_tokens / seconds. For each batch size in `batches` the
// engine and the peer run alternately, `rounds` times each; medians are reported, and
// speedup_vs_hf_generate = engine / hf tokens/s per batch size.
//
// The peer runs as one Python process for the whole bench (model loaded once; a warm-up generate
// before the first timed one at each batch size, reported as warmup_seconds) driven over its
// stdin; it times itself between torch.cuda.synchronize() calls. By default generate runs eagerly
// (disable_compile=True); --param hf_compile=on lets it compile its decoding forward as it does on
// CUDA with a static cache (mode "reduce-overhead", CUDA graphs): the stronger peer, at the price
// of a compilation per batch size (its warmup_seconds).
//
// Greedy agreement: the first `agree_tokens` tokens of every row, engine against peer. With the
// same bfloat16 weights the two still round differently (fused vs separate projections, other
// kernels), and random weights give nearly flat logits, so a near-tie may flip; the fraction is
// reported, never a failure.
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "bench/registry.h"
#include "flywheel/actor/rollout_engine.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/hf_export.h"
#include "flywheel/model/placement.h"
#include "flywheel/model/torch_status.h"

namespace flywheel::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

absl::StatusOr<ModelOptions> GpuBenchModel(const BenchArgs& args) {
  ModelOptions m;
  const std::string name = args.GetString("model", "qwen3-0.6b");
  if (name == "qwen3-0.6b") {
    SetQwen3_0_6BShape(m);
  } else if (name == "tiny") {
    m.vocab_size = 512;
    m.hidden_size = 64;
    m.num_layers = 2;
    m.num_heads = 4;
    m.num_kv_heads = 2;
    m.head_dim = 32;
    m.intermediate_size = 192;
    m.rms_norm_eps = 1e-6;
  } else {
    return absl::InvalidArgumentError(
        StrCat("rollout-gpu bench: --param model=", name, ": use qwen3-0.6b or tiny"));
  }
  m.qk_norm = true;
  m.tie_embeddings = true;
  m.seed = 1;
  m.device = args.GetString("device", "cuda");
  m.dtype = args.GetString("dtype", "bfloat16");
  return m;
}

struct EngineRun {
  double seconds = 0;
  std::vector<std::vector<int64_t>> first_tokens;  // per row, the first `keep` generated
};

// Generates `new_tokens` greedy tokens for each of the first `batch` prompts; timed from the
// engine's creation (its cache allocation) to the last token, as the peer's generate allocates
// its static cache.
// The value of the [actor] option spelled `name`, as a config file spells it.
template <typename E, size_t N>
std::optional<E> ChoiceNamed(const config::ChoiceName<E> (&names)[N], std::string_view name) {
  for (const auto& choice : names) {
    if (choice.name == name) return choice.value;
  }
  return std::nullopt;
}

absl::StatusOr<EngineRun> RunEngine(const std::shared_ptr<const WeightSnapshot>& snapshot,
                                    const std::vector<std::vector<int64_t>>& prompts, int64_t batch,
                                    int64_t new_tokens, DecodeBackend backend,
                                    DecodeGraphMode graphs, int64_t keep,
                                    const torch::Device& device) {
  RolloutEngineOptions options;
  options.backend = backend;
  options.decode_graphs = graphs;
  options.initial_slots = batch;
  options.initial_capacity = static_cast<int64_t>(prompts[0].size()) + new_tokens;
  SamplingParams greedy;
  greedy.top_k = 1;
  SynchronizeDevice(device);
  const auto start = Clock::now();
  ASSIGN_OR_RETURN(auto engine, RolloutEngine::Create(options, snapshot));
  std::vector<SequenceId> ids;
  for (int64_t i = 0; i < batch; ++i) {
    ASSIGN_OR_RETURN(SequenceId id, engine->AddSequence(prompts[i], {greedy, 1000 + uint64_t(i)}));
    RETURN_IF_ERROR(engine->StartTurn(id, {new_tokens, {}}));
    ids.push_back(id);
  }
  while (engine->num_generating() > 0) RETURN_IF_ERROR(engine->Step().status());
  SynchronizeDevice(device);
  EngineRun run;
  run.seconds = SecondsSince(start);
  for (SequenceId id : ids) {
    ASSIGN_OR_RETURN(auto tokens, engine->Tokens(id));
    const auto first = tokens.end() - new_tokens;
    run.first_tokens.emplace_back(first, first + std::min(keep, new_tokens));
  }
  return run;
}

// bench/rollout_hf.py as one process for the whole bench, fed requests on its stdin; each reply
// is a JSON file it renames into `dir_`. SIGPIPE is ignored while it lives, so that a peer that
// died makes a write fail instead of ending the bench.
class HfPeer {
 public:
  static absl::StatusOr<std::unique_ptr<HfPeer>> Start(const BenchArgs& args,
                                                       const std::string& python,
                                                       const fs::path& model_dir,
                                                       const fs::path& spec, const fs::path& dir,
                                                       bool fake, double timeout_s) {
    auto peer = std::unique_ptr<HfPeer>(new HfPeer(dir, timeout_s));
    const std::string cmd =
        StrCat(python, " -u '", args.source_dir, "/bench/rollout_hf.py' --model '",
               model_dir.string(), "' --spec '", spec.string(), "' --replies '", dir.string(), "'",
               fake ? " --fake" : "", " > '", peer->log().string(), "' 2>&1");
    peer->pipe_ = ::popen(cmd.c_str(), "w");
    if (peer->pipe_ == nullptr) return absl::InternalError(StrCat("cannot start: ", cmd));
    return peer;
  }

  ~HfPeer() {
    if (pipe_ != nullptr) {
      std::fputs("{\"quit\": true}\n", pipe_);
      ::pclose(pipe_);
    }
    std::signal(SIGPIPE, old_sigpipe_);
  }

  // Generates for the first `batch` prompts; the peer's reply. An error.json (the peer could not
  // start) is FailedPrecondition with its message: the variant is skipped, not the bench failed.
  absl::StatusOr<nlohmann::json> Generate(int64_t batch) {
    const int64_t id = next_id_++;
    const std::string request = StrCat("{\"id\": ", id, ", \"batch\": ", batch, "}\n");
    const fs::path reply = dir_ / StrCat("reply-", id, ".json");
    const fs::path error = dir_ / "error.json";
    if (std::fputs(request.c_str(), pipe_) < 0 || std::fflush(pipe_) != 0) {
      if (fs::exists(error)) return StartError(error);
      return absl::InternalError(StrCat("hf peer exited; its log: ", LogTail()));
    }
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
    while (!fs::exists(reply)) {
      if (fs::exists(error)) return StartError(error);
      if (Clock::now() > deadline) {
        return absl::DeadlineExceededError(
            StrCat("hf peer: no reply to batch ", batch, " within ", timeout_s_,
                   " s (--param peer_timeout_s); its log: ", LogTail()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::ifstream in(reply);
    auto json = nlohmann::json::parse(in, nullptr, false);
    if (json.is_discarded() || json.contains("error")) {
      return absl::InternalError(
          StrCat("hf peer at batch ", batch, ": ",
                 json.is_discarded() ? "unreadable reply" : json["error"].get<std::string>(),
                 "; its log: ", LogTail()));
    }
    return json;
  }

 private:
  HfPeer(fs::path dir, double timeout_s)
      : dir_(std::move(dir)), timeout_s_(timeout_s), old_sigpipe_(std::signal(SIGPIPE, SIG_IGN)) {}

  fs::path log() const { return dir_ / "peer.log"; }

  absl::Status StartError(const fs::path& error) const {
    std::ifstream in(error);
    auto json = nlohmann::json::parse(in, nullptr, false);
    return absl::FailedPreconditionError(json.is_discarded() ? "hf peer failed to start"
                                                             : json["error"].get<std::string>());
  }

  std::string LogTail() const {
    std::ifstream in(log());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
  }

  fs::path dir_;
  double timeout_s_;
  void (*old_sigpipe_)(int);
  FILE* pipe_ = nullptr;
  int64_t next_id_ = 0;
};

// Empty when `python` can import torch and transformers; otherwise why the peer is skipped.
std::string HfSkipReason(const std::string& python) {
  // Only a failed import counts: warnings printed by an import that works are ignored.
  const std::string cmd = StrCat("out=$(", python,
                                 " -c 'import torch, transformers' 2>&1) || { printf '%s' \"$out\" "
                                 "| tail -n 1; echo; exit 1; }");
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return StrCat("cannot run ", python);
  std::string text;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) text += buf;
  const int rc = ::pclose(p);
  if (rc == 0) return "";
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return StrCat(python, " cannot import torch and transformers (", text,
                "): hf_generate variant skipped; --param python=INTERPRETER names another");
}

// Greedy agreement of the first k tokens: per row the length of the common prefix (after the
// first difference the two sides continue from different contexts).
nlohmann::json Agreement(const std::vector<std::vector<int64_t>>& engine,
                         const nlohmann::json& peer, int64_t k) {
  double prefix = 0, first = 0, all = 0;
  const size_t rows = std::min(engine.size(), peer.size());
  for (size_t r = 0; r < rows; ++r) {
    const auto theirs = peer[r].get<std::vector<int64_t>>();
    int64_t same = 0;
    while (same < k && same < static_cast<int64_t>(engine[r].size()) &&
           same < static_cast<int64_t>(theirs.size()) && engine[r][same] == theirs[same]) {
      ++same;
    }
    prefix += static_cast<double>(same) / static_cast<double>(k);
    first += same > 0 ? 1 : 0;
    all += same == k ? 1 : 0;
  }
  const double n = rows > 0 ? static_cast<double>(rows) : 1.0;
  return {{"tokens", k},
          {"prefix_fraction", prefix / n},
          {"first_token_fraction", first / n},
          {"all_k_fraction", all / n}};
}

}  // namespace

absl::StatusOr<BenchReport> RunRolloutGpuBench(const BenchArgs& args) {
  ASSIGN_OR_RETURN(ModelOptions m, GpuBenchModel(args));
  ASSIGN_OR_RETURN(const std::vector<int64_t> batches,
                   ParseIntList(args, "batches", args.quick ? "2,4" : "64,128,256"));
  const int64_t prompt_len = args.GetInt("prompt", args.quick ? 16 : 128);
  const int64_t new_tokens = args.GetInt("new_tokens", args.quick ? 8 : 128);
  const int64_t rounds = std::max<int64_t>(1, args.GetInt("rounds", args.quick ? 1 : 2));
  const int64_t agree = std::min(args.GetInt("agree_tokens", 8), new_tokens);
  const std::string python = args.GetString("python", "python3");
  const std::string hf = args.GetString("hf", "on");  // on | off | fake
  const bool hf_compile = args.GetString("hf_compile", "off") == "on";
  const std::string backend_name = args.GetString("backend", "torch");
  const std::optional<DecodeBackend> backend = ChoiceNamed(kDecodeBackendNames, backend_name);
  if (!backend) {
    return absl::InvalidArgumentError("rollout-gpu bench: --param backend=torch|cpu|auto");
  }
  const std::string graphs_name = args.GetString("decode_graphs", "auto");
  const std::optional<DecodeGraphMode> graphs = ChoiceNamed(kDecodeGraphModeNames, graphs_name);
  if (!graphs) {
    return absl::InvalidArgumentError("rollout-gpu bench: --param decode_graphs=auto|on|off");
  }
  if (prompt_len <= 0 || new_tokens <= 0 || agree <= 0) {
    return absl::InvalidArgumentError(
        "rollout-gpu bench: prompt, new_tokens and agree_tokens must be > 0");
  }
  m.max_seq_len = prompt_len + new_tokens;
  RETURN_IF_ERROR(m.Validate());
  auto device_or = ModelDevice(m);
  if (!device_or.ok()) {
    return absl::FailedPreconditionError(
        StrCat("rollout-gpu bench: ", device_or.status().message(),
               " (--param device=cpu --param dtype=float32 --param model=tiny runs it here)"));
  }
  const torch::Device device = *device_or;
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());

  // The model, its snapshot on the device and its Hugging Face export in the snapshot's dtype.
  const fs::path dir =
      fs::temp_directory_path() / StrCat("flywheel_rollout_gpu_bench_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{dir};
  auto start = Clock::now();
  ASSIGN_OR_RETURN(Transformer model, MakeTransformer(m));
  const int64_t parameters = model->NumParameters();
  ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> snapshot, MakeSnapshot(model, 1));
  const double build_s = SecondsSince(start);
  // Progress on stderr: a run on a borrowed machine that dies shows how far it got.
  spdlog::info("rollout-gpu: {} parameters built and snapshotted on {} in {:.1f} s", parameters,
               device.str(), build_s);
  start = Clock::now();
  HfExportOptions export_options;
  export_options.dtype = ModelDtype(m);
  RETURN_IF_ERROR(ExportHfModelDirectory(*model, export_options, dir / "hf"));
  const double export_s = SecondsSince(start);
  spdlog::info("rollout-gpu: exported for transformers in {:.1f} s", export_s);
  model = nullptr;  // the snapshot holds the weights the engine decodes with

  std::mt19937_64 rng(7);
  std::vector<std::vector<int64_t>> prompts(max_batch, std::vector<int64_t>(prompt_len));
  for (auto& prompt : prompts) {
    for (auto& t : prompt) t = 1 + static_cast<int64_t>(rng() % (m.vocab_size - 1));
  }

  std::string skipped;
  std::unique_ptr<HfPeer> peer;
  if (hf == "off") {
    skipped = "hf_generate variant off (--param hf=off)";
  } else if (hf != "fake") {
    skipped = HfSkipReason(python);
  }
  if (skipped.empty()) {
    const nlohmann::json spec = {{"prompts", prompts},    {"new_tokens", new_tokens},
                                 {"agree_tokens", agree}, {"device", device.str()},
                                 {"dtype", m.dtype},      {"compile", hf_compile}};
    std::ofstream(dir / "spec.json") << spec.dump();
    ASSIGN_OR_RETURN(peer, HfPeer::Start(args, python, dir / "hf", dir / "spec.json", dir,
                                         hf == "fake", args.GetDouble("peer_timeout_s", 600)));
  }

  // Engine warm-up (kernels, allocator) at every batch size, short.
  for (int64_t b : batches) {
    spdlog::info("rollout-gpu: engine warm-up at batch {}", b);
    RETURN_IF_ERROR(RunEngine(snapshot, prompts, b, std::min<int64_t>(4, new_tokens), *backend,
                              *graphs, 1, device)
                        .status());
  }

  struct PerBatch {
    std::vector<double> engine_s, hf_s;
    std::vector<std::vector<int64_t>> engine_first;
    nlohmann::json hf_last, hf_first, hf_warmup = nullptr;
  };
  std::map<int64_t, PerBatch> per;
  for (int64_t r = 0; r < rounds; ++r) {
    for (int64_t b : batches) {
      PerBatch& p = per[b];
      spdlog::info("rollout-gpu: round {} batch {}: engine", r + 1, b);
      ASSIGN_OR_RETURN(EngineRun run,
                       RunEngine(snapshot, prompts, b, new_tokens, *backend, *graphs, agree, device));
      p.engine_s.push_back(run.seconds);
      if (r == 0) p.engine_first = std::move(run.first_tokens);
      if (peer == nullptr) continue;
      spdlog::info("rollout-gpu: round {} batch {}: engine {:.2f} s; hf generate", r + 1, b,
                   run.seconds);
      absl::StatusOr<nlohmann::json> reply = peer->Generate(b);
      if (reply.ok() && (*reply)["new_tokens_per_row"].get<int64_t>() != new_tokens) {
        reply = absl::InternalError(StrCat("it generated ", (*reply)["new_tokens_per_row"].dump(),
                                           " tokens per row at batch ", b, ", not ", new_tokens));
      }
      if (!reply.ok()) {
        // The engine's figures still count (the GPU machine's one run cannot be repeated); the
        // peer's are dropped with the reason.
        skipped = StrCat(absl::IsFailedPrecondition(reply.status()) ? "hf peer did not start: "
                                                                    : "hf peer failed: ",
                         reply.status().message());
        peer.reset();
        continue;
      }
      if (reply->contains("warmup_seconds")) p.hf_warmup = (*reply)["warmup_seconds"];
      p.hf_s.push_back((*reply)["seconds"].get<double>());
      spdlog::info("rollout-gpu: round {} batch {}: hf generate {:.2f} s", r + 1, b,
                   p.hf_s.back());
      if (r == 0) p.hf_first = (*reply)["first_tokens"];
      p.hf_last = std::move(*reply);
    }
  }
  peer.reset();
  // The steps from here to the report, logged: a crash after the last round (seen on the H200,
  // cause not yet known) then shows where it happened.
  spdlog::info("rollout-gpu: the peer has exited");
  snapshot.reset();
  SynchronizeDevice(device);
  spdlog::info("rollout-gpu: the engine's weights are released; writing the report");

  BenchReport report;
  report.config = {{"device", device.str()},
                   {"dtype", m.dtype},
                   {"backend", backend_name},
                   {"decode_graphs", graphs_name},
                   {"batches", batches},
                   {"prompt_tokens", prompt_len},
                   {"new_tokens", new_tokens},
                   {"rounds", rounds},
                   {"sampling", "greedy (top_k 1), no stop token: every row generates new_tokens"},
                   {"agree_tokens", agree},
                   {"python", python},
                   {"hf", hf},
                   {"hf_compile", hf_compile},
                   {"model_build_seconds", build_s},
                   {"hf_export_seconds", export_s},
                   {"model",
                    {{"name", args.GetString("model", "qwen3-0.6b")},
                     {"vocab_size", m.vocab_size},
                     {"hidden_size", m.hidden_size},
                     {"num_layers", m.num_layers},
                     {"num_heads", m.num_heads},
                     {"num_kv_heads", m.num_kv_heads},
                     {"head_dim", m.HeadDim()},
                     {"intermediate_size", m.intermediate_size},
                     {"qk_norm", m.qk_norm},
                     {"tie_embeddings", m.tie_embeddings},
                     {"parameters", parameters}}}};
  report.table = {{"batch", "engine tok/s", "hf generate tok/s", "speedup", "greedy prefix agree"}};
  nlohmann::json engine_tps = nlohmann::json::object(), hf_tps = nlohmann::json::object(),
                 speedups = nlohmann::json::object();
  double min_speedup = std::numeric_limits<double>::infinity();
  nlohmann::json agreement_largest = nullptr;
  std::string summary;
  for (int64_t b : batches) {
    const PerBatch& p = per[b];
    const double generated = static_cast<double>(b * new_tokens);
    const double e_tps = generated / Median(p.engine_s);
    nlohmann::json& out = report.results[StrCat("batch_", b)];
    out["engine"] = {{"tokens_per_s", e_tps},
                     {"seconds", Median(p.engine_s)},
                     {"seconds_per_round", p.engine_s}};
    engine_tps[std::to_string(b)] = e_tps;
    std::vector<std::string> row = {std::to_string(b), fmt::format("{:.0f}", e_tps)};
    if (!p.hf_s.empty() && skipped.empty()) {
      const double h_tps = generated / Median(p.hf_s);
      const nlohmann::json agreement = Agreement(p.engine_first, p.hf_first, agree);
      out["hf_generate"] = {{"tokens_per_s", h_tps},
                            {"seconds", Median(p.hf_s)},
                            {"seconds_per_round", p.hf_s},
                            {"warmup_seconds", p.hf_warmup}};
      out["speedup_vs_hf_generate"] = e_tps / h_tps;
      out["greedy_agreement"] = agreement;
      hf_tps[std::to_string(b)] = h_tps;
      speedups[std::to_string(b)] = e_tps / h_tps;
      min_speedup = std::min(min_speedup, e_tps / h_tps);
      if (b == max_batch) agreement_largest = agreement;
      row.push_back(fmt::format("{:.0f}", h_tps));
      row.push_back(fmt::format("{:.2f}x", e_tps / h_tps));
      row.push_back(fmt::format("{:.2f}", agreement["prefix_fraction"].get<double>()));
      summary += fmt::format("{}batch {}: {:.2f}x", summary.empty() ? "" : ", ", b, e_tps / h_tps);
    } else {
      row.insert(row.end(), {"-", "-", "-"});
      summary +=
          fmt::format("{}batch {}: engine {:.0f} tok/s", summary.empty() ? "" : ", ", b, e_tps);
    }
    report.table.push_back(row);
  }
  report.ratios["engine_tokens_per_s"] = engine_tps;
  if (!hf_tps.empty() && skipped.empty()) {
    report.results["hf_peer"] = per[max_batch].hf_last;
    report.results["hf_peer"].erase("first_tokens");
    report.ratios["hf_tokens_per_s"] = hf_tps;
    report.ratios["speedup_vs_hf_generate"] = speedups;
    report.ratios["min_speedup_vs_hf_generate"] = min_speedup;
    report.ratios["greedy_agreement_first_k"] = agreement_largest;
    report.summary = fmt::format("engine vs transformers generate (static cache{}): {}",
                                 hf_compile ? ", compiled" : "", summary);
  } else {
    report.results["hf_generate"] = {{"skipped", skipped}};
    report.ratios["speedup_vs_hf_generate"] = nullptr;
    report.ratios["min_speedup_vs_hf_generate"] = nullptr;
    report.ratios["greedy_agreement_first_k"] = nullptr;
    std::printf("%s\n", skipped.c_str());
    report.summary = fmt::format("{}; hf_generate skipped", summary);
  }
  report.summary += fmt::format(" ({} {}, {} params, {} prompt + {} new tokens)", device.str(),
                                m.dtype, parameters, prompt_len, new_tokens);
  return report;
}

}  // namespace flywheel::bench
