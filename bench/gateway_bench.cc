// `flywheel bench gateway`: what the OpenAI-compatible gateway costs an agent workload, against
// the same engine driven directly, and what its recorded executions cost the learner as trees
// vs as flat paths.
//
//   direct   A threads, each an agent loop of C calls: render the conversation with the
//            PromptRenderer, GenerationLoop::Submit, Wait, Decode the text, continue
//   gateway  the same A agent loops over HTTP (an httplib::Client per thread, keep-alive):
//            POST /executions, C non-streaming POST /{id}/v1/chat/completions, POST
//            /{id}/finish with a reward; the registry's sink collects the executions
//
// Each side has its own engine (the same random tiny model: one snapshot) in its own
// GenerationLoop with max_sequences = A, so both decode the A agents' calls together by
// continuous batching. The model's vocabulary is the Qwen3 tokenizer's 151,669 ids rather than
// Qwen3's 151,936 rows: a random model samples the padding rows (0.18 % of its tokens), which
// have no text, so every sampled token here is one the agents see. A
// first call is the same prompt, seed and weights on both sides, so its text must agree
// (first_calls_identical). Call k of an agent sends the conversation so far: the system prompt, the
// agent's task, then per earlier call the assistant text it got back and a short user reply;
// max_tokens T, temperature 1, a seed per (agent, call). Both sides render the prompt with the
// same renderer (the gateway inside its request handler) and decode the generated tokens; the
// gateway alone also parses and writes JSON (both ends), matches each prompt against the
// execution's earlier calls (context_match.h), decodes the text as the tokens arrive, parses the
// assistant output and records the call.
//
// The sides alternate over rounds (the first side alternating). Per round: generated tokens/s =
// generated tokens / wall time of the round (the gateway's includes opening and finishing the
// executions), and one latency per call (from the conversation in hand to the assistant text in
// hand). Reported: the medians over rounds of each side's tokens/s, gateway_overhead = median
// over rounds of 1 − gateway/direct, gateway_p99_added_ms = median over rounds of p99(gateway)
// − p99(direct), the same for p50, and gateway_cpu_ratio (process CPU seconds per token,
// gateway / direct). A gateway request that gets no HTTP answer is retried as OpenAI's SDKs do,
// and counted: the agents of a round connect at once, and a full listen backlog drops
// connections (the kernel's count of those is reported too).
//
// Then the executions the gateway recorded in the last round are trained on, as TreeLearner
// steps (PPO-clip, exact weighting: the same gradient either way) with the executions packed as
// prefix-sharing trees (packing "group", which with group_size 1 is a tree per execution) and as
// flat paths (packing "flat"), alternating over rounds: tree_vs_flat_time_per_step = median over
// steps of tree seconds / flat seconds (lower is better), with both token counts. By default the
// learner's vocabulary is compacted to the ids the executions hold (a bijection: the trees are
// unchanged), since logits over Qwen3's vocabulary for every packed token would take gigabytes;
// --param learner_vocab=full keeps it.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/registry.h"
#include "flywheel/actor/chat_turn_format.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/gateway/execution_registry.h"
#include "flywheel/gateway/gateway_server.h"
#include "flywheel/gateway/generation_loop.h"
#include "flywheel/gateway/prompt_renderer.h"
#include "flywheel/learner/tree_learner.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/tokenizer/hf_tokenizer.h"

namespace flywheel::bench {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr char kAdminToken[] = "bench-admin";
// A call that has not answered in this long failed (a hung engine must not hang the bench).
constexpr absl::Duration kCallTimeout = absl::Minutes(10);

struct Knobs {
  int64_t agents = 64;
  int64_t calls = 4;
  int64_t max_tokens = 32;
  int64_t rounds = 3;
  int64_t group_size = 1;  // agents per task (a GRPO group: same task text, one group_id)
  int64_t warmup_agents = 8;
  // The model: Qwen3's tokenizer, src/flywheel/model/testdata/hf_tiny_chat_model.py's shape.
  int64_t vocab = 0;  // 0: the tokenizer's ids
  int64_t hidden = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t intermediate = 172;
  int64_t max_seq_len = 2048;
  // Fixed, and the same on both sides: "auto" times the backends at each engine's first step,
  // and the two engines could then decode with different ones.
  std::string backend = "cpu";
  int64_t engine_threads = 0;  // 0: LibTorch's default
  // The learner comparison.
  int64_t learner_rounds = 3;
  int64_t step_executions = 0;  // executions per learner step; 0: all of the round's
  std::string learner_vocab = "compact";
};

absl::Status IntKnob(const BenchArgs& args, const std::string& key, int64_t min, int64_t& value) {
  auto it = args.params.find(key);
  if (it == args.params.end()) return absl::OkStatus();
  if (!absl::SimpleAtoi(it->second, &value) || value < min) {
    return absl::InvalidArgumentError(
        StrCat("bench gateway: --param ", key, "=", it->second, ": wants an integer >= ", min));
  }
  return absl::OkStatus();
}

// The tiny Qwen3-shaped model of the knobs, with `vocab` rows and `max_seq_len` positions.
ModelOptions ModelShape(const Knobs& k, int64_t vocab, int64_t max_seq_len) {
  ModelOptions mo;
  mo.vocab_size = vocab;
  mo.hidden_size = k.hidden;
  mo.num_layers = k.layers;
  mo.num_heads = k.heads;
  mo.num_kv_heads = k.kv_heads;
  mo.intermediate_size = k.intermediate;
  mo.qk_norm = true;
  mo.max_seq_len = max_seq_len;
  return mo;
}

absl::StatusOr<Knobs> ParseKnobs(const BenchArgs& args) {
  static const std::set<std::string> kKnown = {
      "agents",         "calls",           "max_tokens",   "rounds",  "group_size",
      "warmup_agents",  "vocab",           "hidden",       "layers",  "heads",
      "kv_heads",       "intermediate",    "max_seq_len",  "backend", "engine_threads",
      "learner_rounds", "step_executions", "learner_vocab"};
  for (const auto& [key, value] : args.params) {
    if (!kKnown.contains(key)) {
      std::string known;
      for (const std::string& k : kKnown) known += (known.empty() ? "" : ", ") + k;
      return absl::InvalidArgumentError(
          StrCat("bench gateway: no --param ", key, " (its knobs: ", known, ")"));
    }
  }
  Knobs k;
  if (args.quick) {
    k.agents = 8;
    k.calls = 2;
    k.max_tokens = 8;
    k.rounds = 1;
    k.warmup_agents = 2;
    k.learner_rounds = 1;
  }
  RETURN_IF_ERROR(IntKnob(args, "agents", 1, k.agents));
  RETURN_IF_ERROR(IntKnob(args, "calls", 1, k.calls));
  RETURN_IF_ERROR(IntKnob(args, "max_tokens", 1, k.max_tokens));
  RETURN_IF_ERROR(IntKnob(args, "rounds", 1, k.rounds));
  RETURN_IF_ERROR(IntKnob(args, "group_size", 1, k.group_size));
  RETURN_IF_ERROR(IntKnob(args, "warmup_agents", 0, k.warmup_agents));
  RETURN_IF_ERROR(IntKnob(args, "vocab", 0, k.vocab));
  RETURN_IF_ERROR(IntKnob(args, "hidden", 8, k.hidden));
  RETURN_IF_ERROR(IntKnob(args, "layers", 1, k.layers));
  RETURN_IF_ERROR(IntKnob(args, "heads", 1, k.heads));
  RETURN_IF_ERROR(IntKnob(args, "kv_heads", 1, k.kv_heads));
  RETURN_IF_ERROR(IntKnob(args, "intermediate", 1, k.intermediate));
  RETURN_IF_ERROR(IntKnob(args, "max_seq_len", 64, k.max_seq_len));
  RETURN_IF_ERROR(IntKnob(args, "engine_threads", 0, k.engine_threads));
  RETURN_IF_ERROR(IntKnob(args, "learner_rounds", 1, k.learner_rounds));
  RETURN_IF_ERROR(IntKnob(args, "step_executions", 0, k.step_executions));
  k.backend = args.GetString("backend", k.backend);
  k.learner_vocab = args.GetString("learner_vocab", k.learner_vocab);
  if (k.learner_vocab != "compact" && k.learner_vocab != "full") {
    return absl::InvalidArgumentError(StrCat(
        "bench gateway: --param learner_vocab=", k.learner_vocab, ": wants compact or full"));
  }
  return k;
}

absl::StatusOr<DecodeBackend> ParseBackend(const std::string& name) {
  for (const auto& [choice, backend] : kDecodeBackendNames) {
    if (choice == name) return backend;
  }
  return absl::InvalidArgumentError(
      StrCat("bench gateway: --param backend=", name, ": wants auto, cpu or torch"));
}

// Qwen3's tokenizer and chat template (third_party/tokenizers/qwen3, from scripts/setup).
struct ChatText {
  std::unique_ptr<HfTokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
  std::unique_ptr<ChatTurnFormat> format;
  std::unique_ptr<gateway::PromptRenderer> renderer;
};

absl::StatusOr<ChatText> LoadQwen3(const std::string& source_dir) {
  const fs::path dir =
      fs::path(source_dir.empty() ? "." : source_dir) / "third_party/tokenizers/qwen3";
  if (!fs::exists(dir / "tokenizer.json")) {
    return absl::FailedPreconditionError(
        StrCat("bench gateway: ", (dir / "tokenizer.json").string(),
               " is missing: run scripts/setup, which fetches the Qwen3 tokenizer"));
  }
  ChatText t;
  HfTokenizerOptions options;
  options.tokenizer_config = (dir / "tokenizer_config.json").string();
  ASSIGN_OR_RETURN(t.tokenizer, LoadHfTokenizer((dir / "tokenizer.json").string(), options));
  ASSIGN_OR_RETURN(ChatTemplate chat_template,
                   LoadChatTemplate((dir / "tokenizer_config.json").string()));
  t.chat_template = std::make_unique<ChatTemplate>(std::move(chat_template));
  ASSIGN_OR_RETURN(t.format, ChatTurnFormat::Create(t.chat_template.get(), t.tokenizer.get()));
  ASSIGN_OR_RETURN(t.renderer, gateway::PromptRenderer::Create(
                                   t.tokenizer.get(), t.chat_template.get(), t.format.get()));
  return t;
}

// The agents' text: a task per group of agents and a short observation after each call.
Json FirstMessages(int64_t agent, int64_t group_size) {
  const int64_t task = agent / group_size;
  return Json::array(
      {{{"role", "system"},
        {"content", "You are a coding agent. Work in small steps and say what you do."}},
       {{"role", "user"},
        {"content",
         StrCat("Task ", task, ": parse_record in module_", task % 17, ".py fails on ", "record ",
                (task * 37) % 1000, " of the fixture; find the bug and ", "propose a fix.")}}});
}

std::string Reply(int64_t agent, int64_t call) {
  return StrCat("Observation ", call + 1, ": ran the tests; ", (agent * 13 + call) % 7,
                " of 12 still fail. Continue.");
}

uint64_t CallSeed(int64_t agent, int64_t call) {
  return 1 + static_cast<uint64_t>(agent) * 1000 + static_cast<uint64_t>(call);
}

float Reward(int64_t agent) { return static_cast<float>((agent * 7919) % 11) / 10.0f; }

// What one agent loop did on one side.
struct AgentRun {
  int64_t tokens = 0;                // generated, stop tokens included
  int64_t retries = 0;               // requests sent again after a connection failed
  double open_ms = -1;               // gateway: POST /executions, the agent's first request
  std::vector<double> latencies_ms;  // one per call
  std::vector<std::string> texts;    // the assistant text of each call
  absl::Status status;
};

struct SideRound {
  double wall_s = 0;
  double cpu_s = 0;  // of the whole process: agents, HTTP threads, engine loop
  int64_t tokens = 0;
  int64_t retries = 0;
  std::vector<double> latencies_ms;
  std::vector<double> open_ms;                  // gateway: one per agent
  std::vector<std::vector<std::string>> texts;  // [agent][call]
  double tokens_per_s() const { return wall_s > 0 ? static_cast<double>(tokens) / wall_s : 0; }
};

// Runs `agents` agent loops on threads of their own; the round's figures.
absl::StatusOr<SideRound> RunAgents(int64_t agents,
                                    const std::function<void(int64_t, AgentRun&)>& agent_loop) {
  std::vector<AgentRun> runs(static_cast<size_t>(agents));
  const auto start = Clock::now();
  const std::clock_t cpu_start = std::clock();
  {
    std::vector<std::thread> threads;
    threads.reserve(runs.size());
    for (int64_t a = 0; a < agents; ++a) {
      threads.emplace_back([&, a] { agent_loop(a, runs[static_cast<size_t>(a)]); });
    }
    for (std::thread& t : threads) t.join();
  }
  SideRound round;
  round.wall_s = SecondsSince(start);
  round.cpu_s = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  for (size_t a = 0; a < runs.size(); ++a) {
    if (!runs[a].status.ok()) {
      return absl::Status(runs[a].status.code(),
                          StrCat("agent ", a, ": ", runs[a].status.message()));
    }
    round.tokens += runs[a].tokens;
    round.retries += runs[a].retries;
    if (runs[a].open_ms >= 0) round.open_ms.push_back(runs[a].open_ms);
    round.latencies_ms.insert(round.latencies_ms.end(), runs[a].latencies_ms.begin(),
                              runs[a].latencies_ms.end());
    round.texts.push_back(std::move(runs[a].texts));
  }
  return round;
}

// The kernel's count of connections dropped because a listen backlog was full (system-wide,
// /proc/net/netstat TcpExt ListenOverflows); -1 where it cannot be read.
int64_t ListenOverflows() {
  std::ifstream in("/proc/net/netstat");
  std::string names, values;
  while (std::getline(in, names) && std::getline(in, values)) {
    if (!names.starts_with("TcpExt:")) continue;
    std::istringstream n(names), v(values);
    std::string name, value;
    while (n >> name && v >> value) {
      int64_t count = 0;
      if (name == "ListenOverflows" && absl::SimpleAtoi(value, &count)) return count;
    }
  }
  return -1;
}

double MsSince(Clock::time_point start) { return 1e3 * SecondsSince(start); }

// The direct side's agent loop: render, submit, wait, decode.
absl::Status DirectAgent(const Knobs& k, int64_t calls, gateway::GenerationLoop& loop,
                         const gateway::PromptRenderer& renderer, const SamplingParams& sampling,
                         int64_t agent, AgentRun& out) {
  Json messages = FirstMessages(agent, k.group_size);
  for (int64_t c = 0; c < calls; ++c) {
    const auto start = Clock::now();
    ASSIGN_OR_RETURN(gateway::RenderedPrompt rendered, renderer.Chat(messages, nullptr, nullptr));
    std::vector<int64_t> prompt = std::move(rendered.tokens);
    gateway::GenerationRequest request;
    request.prompt = std::move(prompt);
    request.sampling = sampling;
    request.seed = CallSeed(agent, c);
    request.turn.max_new_tokens = k.max_tokens;
    request.turn.stop_tokens = renderer.stop_tokens();
    std::shared_ptr<gateway::GenerationStream> stream = loop.Submit(std::move(request));
    ASSIGN_OR_RETURN(const std::vector<GeneratedToken> tokens,
                     stream->Wait(absl::Now() + kCallTimeout));
    std::vector<int64_t> ids;
    ids.reserve(tokens.size());
    for (const GeneratedToken& t : tokens) ids.push_back(t.token);
    ASSIGN_OR_RETURN(std::string text, renderer.Decode(ids));
    out.latencies_ms.push_back(MsSince(start));
    out.tokens += static_cast<int64_t>(tokens.size());
    out.texts.push_back(text);
    messages.push_back({{"role", "assistant"}, {"content", std::move(text)}});
    messages.push_back({{"role", "user"}, {"content", Reply(agent, c)}});
  }
  return absl::OkStatus();
}

// A request that got no HTTP answer (the connection failed) is sent again after a back-off, as
// the OpenAI SDKs do (their max_retries), and counted: a burst of agents connecting at once can
// overflow the server's listen backlog.
constexpr int kAttempts = 4;

absl::StatusOr<Json> PostJson(httplib::Client& client, const std::string& path,
                              const std::string& token, const Json& body, int64_t& retries) {
  const std::string payload = body.dump();
  for (int attempt = 0;; ++attempt) {
    httplib::Result r = client.Post(path, {{"Authorization", StrCat("Bearer ", token)}}, payload,
                                    "application/json");
    if (!r) {
      if (attempt + 1 == kAttempts) {
        return absl::UnavailableError(StrCat("POST ", path, ": ", httplib::to_string(r.error()),
                                             " (", kAttempts, " attempts)"));
      }
      ++retries;
      std::this_thread::sleep_for(std::chrono::milliseconds(500 << attempt));
      continue;
    }
    if (r->status != 200) {
      return absl::InternalError(StrCat("POST ", path, ": status ", r->status, ": ", r->body));
    }
    Json answer = Json::parse(r->body, nullptr, /*allow_exceptions=*/false);
    if (answer.is_discarded()) return absl::InternalError(StrCat("POST ", path, ": not JSON"));
    return answer;
  }
}

// The gateway side's agent loop, as an OpenAI client writes it.
absl::Status GatewayAgent(const Knobs& k, int64_t calls, const std::string& host, int port,
                          int64_t agent, AgentRun& out) {
  httplib::Client client(host, port);
  client.set_keep_alive(true);
  client.set_read_timeout(absl::ToInt64Seconds(kCallTimeout), 0);
  const auto open_start = Clock::now();
  Json open = {{"task_id", StrCat("task-", agent / k.group_size)}};
  if (k.group_size > 1) open["group_id"] = StrCat("group-", agent / k.group_size);
  ASSIGN_OR_RETURN(const Json opened,
                   PostJson(client, "/executions", kAdminToken, open, out.retries));
  out.open_ms = MsSince(open_start);
  const std::string id = opened.value("execution_id", "");
  const std::string token = opened.value("token", "");
  Json messages = FirstMessages(agent, k.group_size);
  for (int64_t c = 0; c < calls; ++c) {
    const auto start = Clock::now();
    const Json request = {{"model", "flywheel"},
                          {"messages", messages},
                          {"max_tokens", k.max_tokens},
                          {"temperature", 1.0},
                          {"seed", CallSeed(agent, c)}};
    ASSIGN_OR_RETURN(Json answer, PostJson(client, StrCat("/", id, "/v1/chat/completions"), token,
                                           request, out.retries));
    if (!answer.contains("choices") || answer["choices"].empty() || !answer.contains("usage")) {
      return absl::InternalError(StrCat("call ", c, ": no choices or usage: ", answer.dump()));
    }
    Json message = std::move(answer["choices"][0]["message"]);
    out.latencies_ms.push_back(MsSince(start));
    out.tokens += answer["usage"].value("completion_tokens", int64_t{0});
    out.texts.push_back(message["content"].is_string() ? message["content"].get<std::string>()
                                                       : std::string());
    messages.push_back(std::move(message));
    messages.push_back({{"role", "user"}, {"content", Reply(agent, c)}});
  }
  return PostJson(client, StrCat("/", id, "/finish"), token, {{"reward", Reward(agent)}},
                  out.retries)
      .status();
}

// ---- tree vs flat learner steps on the recorded executions ----

// The executions with their ids renumbered densely (sorted order): the same trees over a
// vocabulary of the ids they hold. Returns that vocabulary's size.
int64_t CompactVocabulary(std::vector<Execution>& executions) {
  std::set<int32_t> ids;
  for (const Execution& e : executions) {
    for (const LlmCall& c : e.calls) {
      ids.insert(c.context.begin(), c.context.end());
      ids.insert(c.generated.begin(), c.generated.end());
    }
  }
  std::map<int32_t, int32_t> dense;
  for (int32_t id : ids) dense.emplace(id, static_cast<int32_t>(dense.size()));
  for (Execution& e : executions) {
    for (LlmCall& c : e.calls) {
      for (int32_t& t : c.context) t = dense[t];
      for (int32_t& t : c.generated) t = dense[t];
    }
  }
  return static_cast<int64_t>(dense.size());
}

// Calls whose generated text comes back as other text when tokenised again (Qwen3's tokenizer
// normalises to NFC; a random model writes decomposed accents and compatibility ideographs):
// the gateway cannot find such a call's text in the next prompt, which is then re-rendered and
// splits the execution's tree.
absl::StatusOr<int64_t> UnstableTexts(const std::vector<Execution>& executions,
                                      const Tokenizer& tokenizer) {
  int64_t unstable = 0;
  for (const Execution& e : executions) {
    for (const LlmCall& c : e.calls) {
      ASSIGN_OR_RETURN(const std::string text, tokenizer.Decode(std::vector<int64_t>(
                                                   c.generated.begin(), c.generated.end())));
      ASSIGN_OR_RETURN(const std::vector<int64_t> again, tokenizer.Encode(text));
      ASSIGN_OR_RETURN(const std::string back, tokenizer.Decode(again));
      unstable += back != text;
    }
  }
  return unstable;
}

struct Arm {
  std::string name;
  TreeLearnerOptions options;
  std::unique_ptr<TreeLearner> learner;
  std::vector<double> step_s;
  int64_t tokens = 0, cells = 0, rows = 0;  // over one round of steps
};

absl::StatusOr<nlohmann::json> CompareTreeFlat(std::vector<Execution> executions, const Knobs& k,
                                               int64_t model_vocab, const Tokenizer& tokenizer,
                                               BenchReport& report) {
  if (executions.empty()) return absl::InternalError("bench gateway: no recorded executions");
  ASSIGN_OR_RETURN(const int64_t unstable, UnstableTexts(executions, tokenizer));
  std::sort(executions.begin(), executions.end(),
            [](const Execution& a, const Execution& b) { return a.task_id < b.task_id; });
  int64_t calls = 0, tokens_per_call = 0, continued = 0;
  for (const Execution& e : executions) {
    calls += static_cast<int64_t>(e.calls.size());
    for (size_t i = 0; i < e.calls.size(); ++i) {
      const LlmCall& c = e.calls[i];
      tokens_per_call += static_cast<int64_t>(c.context.size() + c.generated.size());
      if (i == 0) continue;
      // Does this call's context go on from the previous call's own tokens?
      const LlmCall& p = e.calls[i - 1];
      continued += c.context.size() >= p.context.size() + p.generated.size() &&
                   std::equal(p.context.begin(), p.context.end(), c.context.begin()) &&
                   std::equal(p.generated.begin(), p.generated.end(),
                              c.context.begin() + static_cast<std::ptrdiff_t>(p.context.size()));
    }
  }
  const int64_t vocab = k.learner_vocab == "compact" ? CompactVocabulary(executions) : model_vocab;
  const size_t per_step =
      k.step_executions > 0 ? static_cast<size_t>(k.step_executions) : executions.size();
  std::vector<std::vector<Execution>> steps;
  for (size_t i = 0; i < executions.size(); i += per_step) {
    steps.emplace_back(executions.begin() + static_cast<std::ptrdiff_t>(i),
                       executions.begin() +
                           static_cast<std::ptrdiff_t>(std::min(executions.size(), i + per_step)));
  }

  Arm tree, flat;
  tree.name = "tree";
  flat.name = "flat";
  for (Arm* arm : {&tree, &flat}) {
    arm->options.weighting = TreeWeighting::kExact;
    arm->options.packing = arm == &tree ? TreePacking::kGroup : TreePacking::kFlat;
    arm->options.loss.kind = PolicyLossKind::kPpoClip;
  }
  // Shapes first: the model must hold the longest row, and full-vocabulary logits must fit.
  int64_t longest_row = 0, paths = 0;
  for (const std::vector<Execution>& step : steps) {
    for (Arm* arm : {&tree, &flat}) {
      ASSIGN_OR_RETURN(const TreeBatch batch, PrepareTreeBatch(step, arm->options));
      longest_row = std::max(longest_row, batch.packed.length);
      arm->tokens += batch.packed.real_tokens;
      arm->rows += batch.packed.rows;
      arm->cells += batch.packed.rows * batch.packed.length;
      if (arm == &flat) paths += batch.paths;
      const double logits_gib = static_cast<double>(batch.packed.rows * batch.packed.length) *
                                static_cast<double>(vocab) * 4.0 / (1 << 30);
      if (logits_gib > 4.0) {
        return absl::ResourceExhaustedError(fmt::format(
            "bench gateway: a {} step's logits would take {:.1f} GiB ({} x {} cells x {} ids): "
            "lower --param step_executions or use --param learner_vocab=compact",
            arm->name, logits_gib, batch.packed.rows, batch.packed.length, vocab));
      }
    }
  }
  ModelOptions mo = ModelShape(k, vocab, std::max(k.max_seq_len, longest_row));
  mo.seed = 2;  // both arms start from the same weights
  OptimizerOptions optimizer;
  optimizer.schedule.lr = 1e-4;
  optimizer.schedule.total_steps = 1 << 20;
  for (Arm* arm : {&tree, &flat}) {
    ASSIGN_OR_RETURN(Transformer model, MakeTransformer(mo));
    arm->learner = std::make_unique<TreeLearner>(std::move(model), arm->options, optimizer);
  }
  // A warm-up step of each (first-touch allocations), then rounds that alternate the arm that
  // runs first; a ratio per step pair, taken next to each other in time.
  for (Arm* arm : {&tree, &flat}) RETURN_IF_ERROR(arm->learner->Step(steps.front()).status());
  std::vector<double> ratios;
  for (int64_t r = 0; r < k.learner_rounds; ++r) {
    for (const std::vector<Execution>& step : steps) {
      std::vector<Arm*> order = {&tree, &flat};
      if (r % 2 == 1) std::reverse(order.begin(), order.end());
      for (Arm* arm : order) {
        const auto start = Clock::now();
        RETURN_IF_ERROR(arm->learner->Step(step).status());
        arm->step_s.push_back(SecondsSince(start));
      }
      ratios.push_back(tree.step_s.back() / flat.step_s.back());
    }
  }

  const double saved = 1.0 - static_cast<double>(tree.tokens) / static_cast<double>(flat.tokens);
  nlohmann::json out = {
      {"executions", static_cast<int64_t>(executions.size())},
      {"llm_calls", calls},
      {"steps_per_round", static_cast<int64_t>(steps.size())},
      {"executions_per_step", static_cast<int64_t>(per_step)},
      {"rounds", k.learner_rounds},
      {"learner_vocab", k.learner_vocab},
      {"vocab", vocab},
      {"paths", paths},
      {"later_calls", calls - static_cast<int64_t>(executions.size())},
      {"later_calls_continuing_the_previous_call", continued},
      {"calls_whose_text_does_not_survive_retokenising", unstable},
      {"tokens_tree", tree.tokens},
      {"tokens_flat", flat.tokens},
      {"tokens_saved_ratio", saved},
      {"tokens_if_each_call_trained_alone", tokens_per_call},
      {"loss", "PPO-clip (0.8, 1.2), exact weighting, token mean"},
      {"tree_packing", "group (a tree per GRPO group; per execution when group_size is 1)"},
      {"ratios", ratios},
      {"tree_vs_flat_time_per_step", Median(ratios)}};
  for (const Arm* arm : {&tree, &flat}) {
    out[arm->name] = {{"seconds_per_step_median", Median(arm->step_s)},
                      {"seconds_per_step", arm->step_s},
                      {"tokens", arm->tokens},
                      {"rows", arm->rows},
                      {"cells", arm->cells}};
  }
  // What the figure means for this workload, in words.
  out["note"] = fmt::format(
      "the trees save {:.1f}% of the flat tokens. Each execution is one conversation: where a "
      "call's context goes on from the previous call's own tokens ({} of {} later calls) the "
      "two calls are one path, and flat paths repeat nothing; only the other later calls branch "
      "off, a path of their own that shares a prefix. {} of the {} calls generated text that "
      "comes back as other text when tokenised again (the Qwen3 tokenizer normalises to NFC), "
      "which the gateway's text match (context_match.h) cannot find in the next prompt. "
      "Training each call alone would take {} tokens.",
      100 * saved, continued, calls - static_cast<int64_t>(executions.size()), unstable, calls,
      tokens_per_call);
  report.table.push_back({"tree (learner)", "", "", "", "", StrCat(tree.tokens),
                          fmt::format("{:.3f}", Median(tree.step_s))});
  report.table.push_back({"flat (learner)", "", "", "", "", StrCat(flat.tokens),
                          fmt::format("{:.3f}", Median(flat.step_s))});
  report.table.push_back({"tree/flat", "", "", "", "", fmt::format("saved {:.1f}%", 100 * saved),
                          fmt::format("{:.3f}", Median(ratios))});
  return out;
}

nlohmann::json SideJson(const std::vector<SideRound>& rounds) {
  std::vector<double> tps, p50, p99, cpu;
  int64_t retries = 0;
  for (const SideRound& r : rounds) {
    retries += r.retries;
    cpu.push_back(1e3 * r.cpu_s / static_cast<double>(std::max<int64_t>(1, r.tokens)));
    tps.push_back(r.tokens_per_s());
    p50.push_back(Percentile(r.latencies_ms, 0.5));
    p99.push_back(Percentile(r.latencies_ms, 0.99));
  }
  nlohmann::json per_round = nlohmann::json::array();
  for (size_t i = 0; i < rounds.size(); ++i) {
    per_round.push_back({{"tokens", rounds[i].tokens},
                         {"wall_s", rounds[i].wall_s},
                         {"cpu_s", rounds[i].cpu_s},
                         {"connection_retries", rounds[i].retries},
                         {"tokens_per_s", tps[i]},
                         {"calls", rounds[i].latencies_ms.size()},
                         {"p50_ms", p50[i]},
                         {"p99_ms", p99[i]},
                         {"max_ms", Percentile(rounds[i].latencies_ms, 1.0)}});
    if (!rounds[i].open_ms.empty()) {
      per_round.back()["open_execution_p50_ms"] = Percentile(rounds[i].open_ms, 0.5);
      per_round.back()["open_execution_max_ms"] = Percentile(rounds[i].open_ms, 1.0);
    }
  }
  return {{"tokens_per_s", Median(tps)},   {"p50_ms", Median(p50)},
          {"p99_ms", Median(p99)},         {"cpu_ms_per_token", Median(cpu)},
          {"connection_retries", retries}, {"rounds", per_round}};
}

}  // namespace

absl::StatusOr<BenchReport> RunGatewayBench(const BenchArgs& args) {
  ASSIGN_OR_RETURN(const Knobs k, ParseKnobs(args));
  ASSIGN_OR_RETURN(const ChatText text, LoadQwen3(args.source_dir));
  const gateway::PromptRenderer& renderer = *text.renderer;
  const int64_t vocab = k.vocab > 0 ? k.vocab : text.tokenizer->vocab_size();

  ModelOptions mo = ModelShape(k, vocab, k.max_seq_len);
  mo.seed = 1;
  ASSIGN_OR_RETURN(const Transformer model, MakeTransformer(mo));
  ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> snapshot, MakeSnapshot(model, 0));
  RolloutEngineOptions engine;
  ASSIGN_OR_RETURN(engine.backend, ParseBackend(k.backend));
  engine.intra_op_threads = k.engine_threads;
  SamplingParams sampling;
  sampling.temperature = 1.0;

  // One engine per side, each in its own loop.
  ASSIGN_OR_RETURN(std::unique_ptr<RolloutEngine> direct_engine,
                   RolloutEngine::Create(engine, snapshot));
  ASSIGN_OR_RETURN(std::unique_ptr<RolloutEngine> gateway_engine,
                   RolloutEngine::Create(engine, snapshot));
  ASSIGN_OR_RETURN(
      std::unique_ptr<gateway::GenerationLoop> direct_loop,
      gateway::GenerationLoop::Start(std::move(direct_engine), {.max_sequences = k.agents}));
  ASSIGN_OR_RETURN(
      std::unique_ptr<gateway::GenerationLoop> gateway_loop,
      gateway::GenerationLoop::Start(std::move(gateway_engine), {.max_sequences = k.agents}));
  absl::Mutex mu;
  std::vector<Execution> recorded;  // guarded by mu
  gateway::ExecutionRegistry executions([&](Execution e) {
    absl::MutexLock lock(&mu);
    recorded.push_back(std::move(e));
    return absl::OkStatus();
  });
  GatewayOptions options;
  options.address = "127.0.0.1:0";
  options.max_sequences = k.agents;
  options.max_concurrent_requests = std::max<int64_t>(options.max_concurrent_requests, k.agents);
  options.max_tokens = k.max_tokens;
  ASSIGN_OR_RETURN(std::unique_ptr<gateway::GatewayServer> server,
                   gateway::GatewayServer::Start(options, {.loop = gateway_loop.get(),
                                                           .executions = &executions,
                                                           .renderer = &renderer,
                                                           .sampling = sampling,
                                                           .admin_token = kAdminToken}));
  const std::string address = server->address();
  const std::string host = address.substr(0, address.rfind(':'));
  const int port = std::stoi(address.substr(address.rfind(':') + 1));

  auto run_side = [&](bool gateway, int64_t agents, int64_t calls) {
    return RunAgents(agents, [&, gateway, calls](int64_t a, AgentRun& out) {
      out.status = gateway ? GatewayAgent(k, calls, host, port, a, out)
                           : DirectAgent(k, calls, *direct_loop, renderer, sampling, a, out);
    });
  };
  // Warm-up of both sides (first steps, cache growth, connections), not timed.
  if (k.warmup_agents > 0) {
    for (bool gateway : {false, true}) {
      RETURN_IF_ERROR(run_side(gateway, std::min(k.warmup_agents, k.agents), 1).status());
    }
  }
  std::vector<SideRound> direct, via_gateway;
  std::vector<double> overheads, p50_added, p99_added, cpu_ratios;
  int64_t listen_overflows = 0;
  std::vector<Execution> last_round;
  gateway::GatewayCounts counts_before, counts_after;
  int64_t same_first = 0, same_all = 0;
  for (int64_t r = 0; r < k.rounds; ++r) {
    const bool gateway_first = r % 2 == 1;
    for (bool gateway : {gateway_first, !gateway_first}) {
      if (gateway) {
        absl::MutexLock lock(&mu);
        recorded.clear();
        counts_before = server->counts();
        listen_overflows -= ListenOverflows();
      }
      ASSIGN_OR_RETURN(SideRound round, run_side(gateway, k.agents, k.calls));
      (gateway ? via_gateway : direct).push_back(std::move(round));
      if (gateway) {
        absl::MutexLock lock(&mu);
        last_round = recorded;
        listen_overflows += ListenOverflows();
        counts_after = server->counts();
      }
    }
    const SideRound& d = direct.back();
    const SideRound& g = via_gateway.back();
    overheads.push_back(1.0 - g.tokens_per_s() / d.tokens_per_s());
    cpu_ratios.push_back((g.cpu_s / static_cast<double>(g.tokens)) /
                         (d.cpu_s / static_cast<double>(d.tokens)));
    p50_added.push_back(Percentile(g.latencies_ms, 0.5) - Percentile(d.latencies_ms, 0.5));
    p99_added.push_back(Percentile(g.latencies_ms, 0.99) - Percentile(d.latencies_ms, 0.99));
    if (r == k.rounds - 1) {
      for (int64_t a = 0; a < k.agents; ++a) {
        for (int64_t c = 0; c < k.calls; ++c) {
          const bool same = d.texts[a][c] == g.texts[a][c];
          same_all += same;
          if (c == 0) same_first += same;
        }
      }
    }
  }
  const gateway::GatewayCounts counts = server->counts();
  if (counts.refused > 0 || counts.busy > 0 || counts.abandoned > 0) {
    return absl::InternalError(StrCat("bench gateway: the gateway refused ", counts.refused,
                                      ", turned away ", counts.busy, " and lost ", counts.abandoned,
                                      " requests"));
  }
  server.reset();  // stop serving before the learner takes the cores
  gateway_loop.reset();
  direct_loop.reset();

  BenchReport report;
  report.config = {
      {"agents", k.agents},
      {"calls_per_agent", k.calls},
      {"max_tokens", k.max_tokens},
      {"temperature", 1.0},
      {"rounds", k.rounds},
      {"first_side", "direct in even rounds (0, 2, …), gateway in odd ones"},
      {"warmup_agents", k.warmup_agents},
      {"group_size", k.group_size},
      {"model",
       {{"vocab", vocab},
        {"hidden", k.hidden},
        {"layers", k.layers},
        {"heads", k.heads},
        {"kv_heads", k.kv_heads},
        {"intermediate", k.intermediate},
        {"qk_norm", true},
        {"max_seq_len", k.max_seq_len},
        {"weights", "random (seed 1), float32"}}},
      {"tokenizer", "Qwen3 (third_party/tokenizers/qwen3), its chat template"},
      {"engine", {{"backend", k.backend}, {"intra_op_threads", k.engine_threads}}},
      {"generation_loop_max_sequences", k.agents},
      {"threads",
       {{"agent_threads_per_side", k.agents},
        {"gateway_http_threads", options.max_concurrent_requests + 4},
        {"engine_loop_threads", 1},
        {"cores", std::thread::hardware_concurrency()}}},
      {"http_client", "cpp-httplib Client per agent thread, keep-alive, non-streaming"},
      {"who_pays_what",
       "both sides render the prompt (chat template + BPE) and decode the generated tokens; the "
       "gateway also serialises and parses JSON at both ends, matches the prompt against the "
       "execution's earlier calls (decoding them), decodes the text again as tokens arrive, "
       "records the call and opens/finishes the execution (inside its round's wall time)"},
      {"gateway_overhead", "median over rounds of 1 - gateway tokens/s / direct tokens/s"},
      {"gateway_cpu_ratio",
       "median over rounds of the process CPU seconds per generated token, gateway / direct "
       "(what the gateway's work costs where no core is idle)"},
      {"connection_retries",
       StrCat("a request that got no HTTP answer is sent again after 0.5, 1, 2 s (", kAttempts,
              " attempts), as OpenAI SDKs retry; counted per side")},
      {"latency", "per call: from the conversation in hand to the assistant text in hand"}};
  if (k.vocab == 0) {
    report.config["model"]["vocab_note"] =
        "the tokenizer's 151,669 ids, not Qwen3's 151,936 rows: a random model samples the 267 "
        "padding rows (0.18% of tokens), which have no text";
  }
  report.results["direct"] = SideJson(direct);
  report.results["gateway"] = SideJson(via_gateway);
  report.results["gateway"]["contexts_matched_last_round"] =
      counts_after.contexts_matched - counts_before.contexts_matched;
  report.results["gateway"]["contexts_rerendered_last_round"] =
      counts_after.contexts_rerendered - counts_before.contexts_rerendered;
  report.results["gateway"]["requests"] = counts.requests;
  report.results["gateway_overhead_per_round"] = overheads;
  report.results["gateway_p50_added_ms_per_round"] = p50_added;
  report.results["gateway_p99_added_ms_per_round"] = p99_added;
  // The sides run the same work: a first call is the same prompt and seed on both; a later call
  // differs where the gateway continued from the earlier call's own tokens (context_match.h).
  report.results["same_text_first_calls"] = same_first;
  report.results["same_text_calls"] = same_all;
  int64_t recorded_calls = 0;
  for (const Execution& e : last_round) recorded_calls += static_cast<int64_t>(e.calls.size());
  report.results["gateway"]["executions_recorded_last_round"] =
      static_cast<int64_t>(last_round.size());
  report.results["gateway"]["calls_recorded_last_round"] = recorded_calls;
  report.results["gateway"]["listen_overflows_during_gateway_rounds"] =
      ListenOverflows() < 0 ? nlohmann::json(nullptr) : nlohmann::json(listen_overflows);
  report.results["gateway_cpu_ratio_per_round"] = cpu_ratios;

  const double direct_tps = report.results["direct"]["tokens_per_s"];
  const double gateway_tps = report.results["gateway"]["tokens_per_s"];
  report.ratios["direct_tokens_per_s"] = direct_tps;
  report.ratios["gateway_tokens_per_s"] = gateway_tps;
  report.ratios["gateway_overhead"] = Median(overheads);
  report.ratios["gateway_p50_added_ms"] = Median(p50_added);
  report.ratios["gateway_p99_added_ms"] = Median(p99_added);
  report.ratios["gateway_cpu_ratio"] = Median(cpu_ratios);
  report.ratios["first_calls_identical"] = same_first == k.agents;
  report.table = {
      {"variant", "tokens/s", "p50 ms", "p99 ms", "CPU ms/token", "learner tokens", "s/step"}};
  for (const char* side : {"direct", "gateway"}) {
    const nlohmann::json& s = report.results[side];
    report.table.push_back({side, fmt::format("{:.0f}", s["tokens_per_s"].get<double>()),
                            fmt::format("{:.1f}", s["p50_ms"].get<double>()),
                            fmt::format("{:.1f}", s["p99_ms"].get<double>()),
                            fmt::format("{:.2f}", s["cpu_ms_per_token"].get<double>()), "", ""});
  }
  report.table.push_back(
      {"gateway vs direct", fmt::format("overhead {:.1f}%", 100 * Median(overheads)),
       fmt::format("{:+.1f}", Median(p50_added)), fmt::format("{:+.1f}", Median(p99_added)),
       fmt::format("x{:.2f}", Median(cpu_ratios)), "", ""});

  ASSIGN_OR_RETURN(nlohmann::json learner,
                   CompareTreeFlat(std::move(last_round), k, vocab, *text.tokenizer, report));
  report.ratios["tree_vs_flat_time_per_step"] = learner["tree_vs_flat_time_per_step"];
  report.ratios["tokens_tree"] = learner["tokens_tree"];
  report.ratios["tokens_flat"] = learner["tokens_flat"];
  report.ratios["tokens_saved_ratio"] = learner["tokens_saved_ratio"];
  report.results["learner"] = std::move(learner);
  const int64_t retries = report.results["gateway"]["connection_retries"];
  report.summary = fmt::format(
      "{} agents x {} calls x {} tokens: gateway {:.0f} tok/s vs direct {:.0f} (overhead "
      "{:.1f}%, CPU per token x{:.2f}), p99 added {:+.1f} ms{}; tree/flat learner time per step "
      "{:.3f} (trees save {:.1f}% of the flat tokens)",
      k.agents, k.calls, k.max_tokens, gateway_tps, direct_tps, 100 * Median(overheads),
      Median(cpu_ratios), Median(p99_added),
      retries > 0 ? StrCat(" (", retries, " connection retries)") : "",
      report.ratios["tree_vs_flat_time_per_step"].get<double>(),
      100 * report.ratios["tokens_saved_ratio"].get<double>());
  return report;
}

}  // namespace flywheel::bench
