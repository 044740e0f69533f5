#include "flywheel/gateway/gateway_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/gateway/context_match.h"
#include "flywheel/observe/http_endpoint.h"

namespace flywheel::gateway {

using Json = nlohmann::ordered_json;

// What one generation request asks for, checked field by field.
struct CallParams {
  Json messages;  // chat
  Json tools;     // chat: null when absent or tool_choice "none"
  Json template_kwargs;
  std::string prompt;  // completions
  SamplingParams sampling;
  std::optional<uint64_t> seed;
  int64_t max_tokens = 0;  // 0: the gateway's default, clamped to the context
  int64_t n = 1;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
};

// One choice of a request while it is generated.
struct Choice {
  std::shared_ptr<GenerationStream> stream;
  std::vector<GeneratedToken> tokens;  // sampled, up to the turn's end or a stop string
  std::string text;                    // what the client sees
  size_t sent = 0;                     // bytes of `text` streamed so far
  std::string finish_reason;           // "stop" | "length"
};

// Holds one of the gateway's request slots for as long as it lives.
class RequestSlot {
 public:
  explicit RequestSlot(std::atomic<int64_t>& in_flight) : in_flight_(in_flight) {}
  ~RequestSlot() { in_flight_.fetch_sub(1); }

 private:
  std::atomic<int64_t>& in_flight_;
};

// Everything a generation request carries from its handler to its answer (a stream's content
// provider runs after the handler returned).
struct Call {
  bool chat = true;
  std::string execution_id;
  Role role = Role::kMain;
  std::string id;  // chatcmpl-… / cmpl-…
  std::string model;
  CallParams params;
  std::vector<int64_t> prompt;
  std::vector<Choice> choices;
  int64_t start_unix_ns = 0;
  std::shared_ptr<RequestSlot> slot;
};

namespace {

// A request that waits longer than this for its tokens is answered 504 (a hung engine must not
// hold an HTTP thread forever).
constexpr absl::Duration kGenerationTimeout = absl::Minutes(30);
constexpr std::string_view kExecutionId = "([A-Za-z0-9._:-]{1,128})";
constexpr std::string_view kRole = "(?:/(main|main-summary|sub-agent|sub-agent-summary))?";

// JSON text whatever the strings hold: a tokenizer of flywheel's own models may decode bytes that
// are not UTF-8, which nlohmann::json refuses to write (it throws); they become U+FFFD.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void WriteError(httplib::Response& response, int status, std::string_view type,
                absl::string_view message, std::string_view param = "",
                std::string_view code = "") {
  const Json body = {{"error",
                      {{"message", message},
                       {"type", type},
                       {"param", param.empty() ? Json(nullptr) : Json(param)},
                       {"code", code.empty() ? Json(nullptr) : Json(code)}}}};
  response.status = status;
  response.set_content(Dump(body), "application/json");
}

// OpenAI's status and error type for a Status.
void WriteStatus(httplib::Response& response, const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return WriteError(response, 400, "invalid_request_error", status.message());
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return WriteError(response, 401, "authentication_error", status.message(), "",
                        "invalid_api_key");
    case absl::StatusCode::kNotFound:
      return WriteError(response, 404, "not_found_error", status.message());
    case absl::StatusCode::kAlreadyExists:
      return WriteError(response, 409, "conflict_error", status.message());
    case absl::StatusCode::kResourceExhausted:
      return WriteError(response, 429, "rate_limit_error", status.message());
    case absl::StatusCode::kDeadlineExceeded:
      return WriteError(response, 504, "timeout_error", status.message());
    default:
      return WriteError(response, 500, "server_error", status.message());
  }
}

std::string BearerToken(const httplib::Request& request) {
  const std::string header = request.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  return header.starts_with(kBearer) ? header.substr(kBearer.size()) : std::string();
}

absl::StatusOr<Json> ParseBody(const httplib::Request& request) {
  Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return absl::InvalidArgumentError(
        "the request body is not a JSON object (Content-Type: application/json)");
  }
  return body;
}

absl::Status FieldError(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(field, " ", what));
}

absl::StatusOr<CallParams> ParseParams(const Json& body, bool chat, const SamplingParams& defaults,
                                       const GatewayOptions& options) {
  CallParams p;
  p.sampling = defaults;
  if (chat) {
    if (!body.contains("messages") || !body["messages"].is_array()) {
      return FieldError("messages", "must be a list of messages");
    }
    p.messages = body["messages"];
    const Json tool_choice = body.value("tool_choice", Json("auto"));
    if (tool_choice.is_string() && tool_choice == "none") {
      p.tools = nullptr;
    } else if (tool_choice.is_string() && tool_choice == "auto") {
      p.tools = body.value("tools", Json(nullptr));
    } else {
      return FieldError("tool_choice",
                        "must be \"auto\" or \"none\": the gateway cannot force a tool call");
    }
    p.template_kwargs = body.value("chat_template_kwargs", Json(nullptr));
    if (body.contains("response_format") && body["response_format"].value("type", "") != "text") {
      return FieldError("response_format", "is not supported (only {\"type\": \"text\"})");
    }
  } else {
    if (!body.contains("prompt") || !body["prompt"].is_string()) {
      return FieldError("prompt", "must be a string");
    }
    p.prompt = body["prompt"].get<std::string>();
  }
  if (body.contains("temperature") && !body["temperature"].is_null()) {
    if (!body["temperature"].is_number() || body["temperature"].get<double>() < 0) {
      return FieldError("temperature", "must be a number >= 0");
    }
    const double t = body["temperature"].get<double>();
    // OpenAI's temperature 0 is greedy decoding: the most likely token, log-prob 0.
    if (t == 0) {
      p.sampling.temperature = 1.0;
      p.sampling.top_k = 1;
    } else {
      p.sampling.temperature = t;
    }
  }
  if (body.contains("top_p") && !body["top_p"].is_null()) {
    if (!body["top_p"].is_number()) return FieldError("top_p", "must be a number in (0, 1]");
    p.sampling.top_p = body["top_p"].get<double>();
  }
  // top_k is not OpenAI's, but vLLM and SGLang take it, and the job's default (a model's
  // generation_config.json) may set it.
  if (body.contains("top_k") && !body["top_k"].is_null()) {
    if (!body["top_k"].is_number_integer()) return FieldError("top_k", "must be an integer");
    p.sampling.top_k = std::max<int64_t>(0, body["top_k"].get<int64_t>());  // -1: vLLM's "all"
  }
  if (absl::Status s = p.sampling.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!body.contains(key) || body[key].is_null()) continue;
    if (!body[key].is_number_integer() || body[key].get<int64_t>() < 1) {
      return FieldError(key, "must be an integer >= 1");
    }
    p.max_tokens = body[key].get<int64_t>();
  }
  if (body.contains("n") && !body["n"].is_null()) {
    if (!body["n"].is_number_integer() || body["n"].get<int64_t>() < 1 ||
        body["n"].get<int64_t>() > options.max_n) {
      return FieldError("n", StrCat("must be an integer in [1, ", options.max_n, "]"));
    }
    p.n = body["n"].get<int64_t>();
  }
  if (body.contains("stop") && !body["stop"].is_null()) {
    const Json& stop = body["stop"];
    if (stop.is_string()) {
      p.stop.push_back(stop.get<std::string>());
    } else if (stop.is_array() && stop.size() <= 4) {
      for (const Json& s : stop) {
        if (!s.is_string()) return FieldError("stop", "must be a string or a list of strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      return FieldError("stop", "must be a string or a list of at most 4 strings");
    }
    if (std::any_of(p.stop.begin(), p.stop.end(), [](const std::string& s) { return s.empty(); })) {
      return FieldError("stop", "strings must not be empty");
    }
  }
  p.stream = body.value("stream", false);
  if (body.contains("stream_options") && body["stream_options"].is_object()) {
    p.include_usage = body["stream_options"].value("include_usage", false);
  }
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer()) return FieldError("seed", "must be an integer");
    p.seed = static_cast<uint64_t>(body["seed"].get<int64_t>());
  }
  const Json logprobs = body.value("logprobs", Json(nullptr));
  p.logprobs = logprobs.is_boolean() ? logprobs.get<bool>()
                                     : logprobs.is_number_integer() && logprobs.get<int64_t>() > 0;
  const Json top = body.value(chat ? "top_logprobs" : "logprobs", Json(nullptr));
  if (top.is_number_integer() && top.get<int64_t>() > (chat ? 0 : 1)) {
    return FieldError(chat ? "top_logprobs" : "logprobs",
                      "above the sampled token's own is not supported: the engine records the "
                      "log-prob of the token it drew only");
  }
  return p;
}

// The longest suffix of `text` that is a proper prefix of a stop string: held back from a stream
// until the next token says whether the stop string completes.
size_t PartialStopSuffix(std::string_view text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& s : stops) {
    for (size_t k = std::min(s.size() - 1, text.size()); k > hold; --k) {
      if (text.substr(text.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

std::vector<int64_t> Ids(const std::vector<GeneratedToken>& tokens) {
  std::vector<int64_t> ids;
  ids.reserve(tokens.size());
  for (const GeneratedToken& t : tokens) ids.push_back(t.token);
  return ids;
}

// Reads `c`'s stream until the turn ends (or a stop string appears: the sequence is cancelled
// and its tokens cut after the one that completed it), passing each new piece of text to
// `on_text`, which returns false when the client has gone (Cancelled).
absl::Status Consume(Choice& c, const PromptRenderer& renderer,
                     const std::vector<std::string>& stops, absl::Time deadline,
                     const std::function<bool(std::string_view)>& on_text) {
  while (true) {
    std::vector<GeneratedToken> more = c.stream->Next(c.tokens.size(), deadline);
    if (more.empty()) {
      if (!c.stream->done()) {
        c.stream->Cancel();
        return absl::DeadlineExceededError("generation did not finish in time");
      }
      RETURN_IF_ERROR(c.stream->status());
      return absl::InternalError("the generation ended without its last token");
    }
    c.tokens.insert(c.tokens.end(), more.begin(), more.end());
    ASSIGN_OR_RETURN(std::string full, renderer.Decode(Ids(c.tokens)));
    bool ended = c.tokens.back().end != TurnEnd::kNone;
    size_t cut = std::string::npos;
    for (const std::string& s : stops) cut = std::min(cut, full.find(s));
    if (cut != std::string::npos) {
      c.stream->Cancel();
      // The policy's turn ends with the token that completed the stop string.
      while (c.tokens.size() > 1) {
        std::vector<GeneratedToken> shorter(c.tokens.begin(), c.tokens.end() - 1);
        ASSIGN_OR_RETURN(const std::string text, renderer.Decode(Ids(shorter)));
        if (text.size() <= cut) break;
        c.tokens = std::move(shorter);
      }
      full.resize(cut);
      c.finish_reason = "stop";
      ended = true;
    } else if (ended) {
      c.finish_reason = c.tokens.back().end == TurnEnd::kStopToken ? "stop" : "length";
    }
    size_t visible = full.size();
    if (!ended) {
      // An incomplete UTF-8 character decodes as U+FFFD until its last byte arrives.
      constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
      if (std::string_view(full).ends_with(kReplacement)) visible -= kReplacement.size();
      visible -=
          std::min(visible, PartialStopSuffix(std::string_view(full).substr(0, visible), stops));
    }
    if (visible > c.sent) {
      if (!on_text(std::string_view(full).substr(c.sent, visible - c.sent))) {
        c.stream->Cancel();
        return absl::CancelledError("the client closed the connection");
      }
      c.sent = visible;
    }
    c.text = std::move(full);
    if (ended) return absl::OkStatus();
  }
}

Json TokenLogprob(const PromptRenderer& renderer, const GeneratedToken& t) {
  const std::string text = renderer.Decode({t.token}).value_or("");
  Json bytes = Json::array();
  for (unsigned char b : text) bytes.push_back(static_cast<int>(b));
  return {
      {"token", text}, {"logprob", t.logprob}, {"bytes", bytes}, {"top_logprobs", Json::array()}};
}

// The tokens a choice shows as log-probs: all it generated but a closing stop token.
std::vector<GeneratedToken> VisibleTokens(const Choice& c) {
  std::vector<GeneratedToken> tokens = c.tokens;
  if (!tokens.empty() && tokens.back().end == TurnEnd::kStopToken) tokens.pop_back();
  return tokens;
}

int64_t UnixSeconds() { return absl::ToUnixSeconds(absl::Now()); }

}  // namespace

absl::StatusOr<std::unique_ptr<GatewayServer>> GatewayServer::Start(const GatewayOptions& options,
                                                                    Parts parts) {
  RETURN_IF_ERROR(options.Validate());
  if (parts.loop == nullptr || parts.executions == nullptr || parts.renderer == nullptr) {
    return absl::InvalidArgumentError("gateway: a generation loop, executions and a renderer");
  }
  std::unique_ptr<GatewayServer> server(new GatewayServer(options, std::move(parts)));
  server->Route();
  ASSIGN_OR_RETURN(server->address_, ListenInBackground(*server->server_, options.address,
                                                        "gateway.address", server->thread_));
  if (options.execution_budget_s > 0) {
    server->reaper_ = std::thread([s = server.get()] { s->ReapOverdue(); });
  }
  return server;
}

GatewayServer::GatewayServer(const GatewayOptions& options, Parts parts)
    : options_(options), parts_(std::move(parts)), server_(std::make_unique<httplib::Server>()) {}

GatewayServer::~GatewayServer() {
  {
    absl::MutexLock lock(&reaper_mu_);
    stopping_ = true;
  }
  if (reaper_.joinable()) reaper_.join();
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string GatewayServer::model_name() const {
  return options_.model_name.empty() ? "flywheel" : options_.model_name;
}

GatewayCounts GatewayServer::counts() const {
  return {requests_.load(), refused_.load(),          abandoned_.load(),
          busy_.load(),     contexts_matched_.load(), contexts_rerendered_.load(),
          expired_.load()};
}

void GatewayServer::Route() {
  httplib::Server& s = *server_;
  // A thread per request in flight, and a few more to answer 429 when they are all taken.
  const size_t threads = static_cast<size_t>(options_.max_concurrent_requests) + 4;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(static_cast<size_t>(options_.max_request_bytes));
  const std::string id = std::string(kExecutionId);
  const std::string role = std::string(kRole);
  s.Post("/executions",
         [this](const httplib::Request& q, httplib::Response& r) { OpenExecution(q, r); });
  s.Post(StrCat("/", id, "/finish"),
         [this](const httplib::Request& q, httplib::Response& r) { FinishExecution(q, r); });
  s.Post(StrCat("/", id, "/env/reset"),
         [this](const httplib::Request& q, httplib::Response& r) { EnvCall(q, r, true); });
  s.Post(StrCat("/", id, "/env/step"),
         [this](const httplib::Request& q, httplib::Response& r) { EnvCall(q, r, false); });
  for (const std::string& prefix : {std::string(), StrCat("/", id)}) {
    s.Get(StrCat(prefix, "/v1/models"),
          [this](const httplib::Request&, httplib::Response& r) { Models(r); });
  }
  for (const std::string& prefix : {std::string(), StrCat("/", id, role)}) {
    s.Post(StrCat(prefix, "/v1/chat/completions"),
           [this](const httplib::Request& q, httplib::Response& r) { Generate(q, r, true); });
    s.Post(StrCat(prefix, "/v1/completions"),
           [this](const httplib::Request& q, httplib::Response& r) { Generate(q, r, false); });
  }
  // httplib's own refusals (unknown path, a body over the limit) in OpenAI's shape too.
  s.set_error_handler([this](const httplib::Request& q, httplib::Response& r) {
    if (!r.body.empty()) return;
    refused_.fetch_add(1);
    if (r.status == 413) {
      return WriteError(r, 413, "invalid_request_error",
                        StrCat("the request body is larger than gateway.max_request_bytes = ",
                               options_.max_request_bytes));
    }
    WriteError(r, r.status, r.status == 404 ? "not_found_error" : "invalid_request_error",
               StrCat("no ", q.method, " ", q.path, " here (see docs/agents.md for the routes)"));
  });
}

void GatewayServer::OpenExecution(const httplib::Request& request, httplib::Response& response) {
  if (!parts_.admin_token.empty() && BearerToken(request) != parts_.admin_token) {
    refused_.fetch_add(1);
    return WriteError(response, 401, "authentication_error",
                      "opening an execution needs the gateway's token (--auth-token-file)", "",
                      "invalid_api_key");
  }
  Json body = Json::object();
  if (!request.body.empty()) {
    absl::StatusOr<Json> parsed = ParseBody(request);
    if (!parsed.ok()) return WriteStatus(response, parsed.status());
    body = *std::move(parsed);
  }
  ExecutionStart start;
  for (auto [key, field] : {std::pair{"execution_id", &start.execution_id},
                            {"group_id", &start.group_id},
                            {"task_id", &start.task_id},
                            {"env_name", &start.env_name}}) {
    if (!body.contains(key)) continue;
    if (!body[key].is_string()) {
      return WriteError(response, 400, "invalid_request_error", StrCat(key, " must be a string"),
                        key);
    }
    *field = body[key].get<std::string>();
  }
  absl::StatusOr<OpenedExecution> opened = parts_.executions->Open(std::move(start));
  if (!opened.ok()) return WriteStatus(response, opened.status());
  const Json answer = {{"execution_id", opened->execution_id},
                       {"token", opened->token},
                       {"base_url", StrCat("http://", address_, "/", opened->execution_id, "/v1")}};
  response.set_content(Dump(answer), "application/json");
}

absl::StatusOr<Json> GatewayServer::ExecutionBody(const httplib::Request& request) {
  RETURN_IF_ERROR(
      parts_.executions->Authorize(std::string(request.matches[1]), BearerToken(request)));
  return ParseBody(request);
}

absl::StatusOr<Execution> GatewayServer::End(const std::string& execution_id,
                                             const ExecutionOutcome& reported) {
  const std::optional<ExecutionOutcome> played =
      parts_.env != nullptr ? parts_.env->Outcome(execution_id) : std::nullopt;
  ASSIGN_OR_RETURN(Execution finished,
                   parts_.executions->Finish(execution_id, played.value_or(reported)));
  if (played) parts_.env->Close(execution_id);
  return finished;
}

void GatewayServer::FinishExecution(const httplib::Request& request, httplib::Response& response) {
  const std::string execution_id = request.matches[1];
  absl::StatusOr<Json> body = ExecutionBody(request);
  if (!body.ok()) return WriteStatus(response, body.status());
  ExecutionOutcome outcome;
  if (body->contains("termination")) {
    absl::StatusOr<Termination> termination =
        (*body)["termination"].is_string()
            ? ParseTermination((*body)["termination"].get<std::string>())
            : absl::InvalidArgumentError("termination must be a string");
    if (!termination.ok()) return WriteStatus(response, termination.status());
    outcome.termination = *termination;
  }
  for (auto [key, field] :
       {std::pair{"reward", &outcome.final_reward}, {"partial_score", &outcome.partial_score}}) {
    if (!body->contains(key) || (*body)[key].is_null()) continue;
    if (!(*body)[key].is_number()) {
      return WriteError(response, 400, "invalid_request_error", StrCat(key, " must be a number"),
                        key);
    }
    *field = (*body)[key].get<float>();
  }
  // An execution that played an episode is scored by its environment, not by its agent.
  if (parts_.env != nullptr && parts_.env->Playing(execution_id) &&
      (body->contains("reward") || body->contains("partial_score") ||
       body->contains("termination"))) {
    return WriteError(response, 400, "invalid_request_error",
                      StrCat("execution '", execution_id,
                             "' played an episode of the environment, which scores it: finish it "
                             "with {}"));
  }
  absl::StatusOr<Execution> finished = End(execution_id, outcome);
  if (!finished.ok()) return WriteStatus(response, finished.status());
  Json answer = {{"execution_id", execution_id},
                 {"calls", finished->calls.size()},
                 {"termination", TerminationName(finished->termination)}};
  if (finished->final_reward) answer["reward"] = *finished->final_reward;
  if (finished->partial_score) answer["partial_score"] = *finished->partial_score;
  response.set_content(Dump(answer), "application/json");
}

void GatewayServer::EnvCall(const httplib::Request& request, httplib::Response& response,
                            bool reset) {
  const std::string execution_id = request.matches[1];
  absl::StatusOr<Json> body = ExecutionBody(request);
  if (!body.ok()) return WriteStatus(response, body.status());
  if (parts_.env == nullptr) {
    return WriteError(response, 404, "not_found_error",
                      "this gateway serves no environment: the agent reports its reward at "
                      "/finish");
  }
  absl::StatusOr<StepResult> result;
  if (reset) {
    std::optional<uint64_t> seed;
    if (body->contains("seed")) {
      if (!(*body)["seed"].is_number_integer()) {
        return WriteError(response, 400, "invalid_request_error", "seed must be an integer",
                          "seed");
      }
      seed = static_cast<uint64_t>((*body)["seed"].get<int64_t>());
    }
    absl::StatusOr<std::string> group = parts_.executions->GroupId(execution_id);
    if (!group.ok()) return WriteStatus(response, group.status());
    result = parts_.env->Reset(execution_id, *group, seed);
  } else {
    if (!body->contains("action") || !(*body)["action"].is_string()) {
      return WriteError(response, 400, "invalid_request_error", "action must be a string",
                        "action");
    }
    result = parts_.env->Step(execution_id, (*body)["action"].get<std::string>());
  }
  if (!result.ok()) return WriteStatus(response, result.status());
  Json answer = {
      {"observation", result->observation}, {"reward", result->reward}, {"done", result->done}};
  if (reset) answer["task"] = parts_.env->task_name();
  if (!result->error.empty()) answer["error"] = result->error;
  response.set_content(Dump(answer), "application/json");
}

void GatewayServer::ReapOverdue() {
  const absl::Duration budget = absl::Seconds(options_.execution_budget_s);
  // Looks often enough that an execution ends within a quarter of its budget (or a second) of it.
  const absl::Duration period = std::min(absl::Seconds(1), budget / 4);
  absl::MutexLock lock(&reaper_mu_);
  while (!reaper_mu_.AwaitWithTimeout(absl::Condition(&stopping_), period)) {
    for (const std::string& id : parts_.executions->OpenedBefore(absl::Now() - budget)) {
      // With an episode: its reward when done, else a timeout with its partial score.
      ExecutionOutcome timeout;
      timeout.termination = Termination::kTimeout;
      if (!End(id, timeout).ok()) {
        parts_.executions->Drop(id).IgnoreError();  // no call, or no score: nothing to train on
        if (parts_.env != nullptr) parts_.env->Close(id);
      }
      expired_.fetch_add(1);
    }
  }
}

void GatewayServer::Models(httplib::Response& response) const {
  const Json model = {
      {"id", model_name()},
      {"object", "model"},
      {"created", UnixSeconds()},
      {"owned_by", "flywheel"},
      {"max_model_len", parts_.loop->max_seq_len()},
      {"prompt_format", parts_.renderer->prompt_format()},
      {"tool_call_format", ToolCallFormatName(parts_.renderer->tool_call_format())}};
  response.set_content(Dump(Json{{"object", "list"}, {"data", Json::array({model})}}),
                       "application/json");
}

void GatewayServer::Generate(const httplib::Request& request, httplib::Response& response,
                             bool chat) {
  requests_.fetch_add(1);
  if (in_flight_.fetch_add(1) >= options_.max_concurrent_requests) {
    in_flight_.fetch_sub(1);
    busy_.fetch_add(1);
    return WriteError(response, 429, "rate_limit_error",
                      StrCat("the gateway is serving gateway.max_concurrent_requests = ",
                             options_.max_concurrent_requests, " requests; retry"));
  }
  auto call = std::make_shared<Call>();
  call->slot = std::make_shared<RequestSlot>(in_flight_);
  call->chat = chat;
  call->model = model_name();
  auto refuse = [&](const absl::Status& status) {
    refused_.fetch_add(1);
    WriteStatus(response, status);
  };
  // Whose call: the path's execution (and role), else the headers'.
  call->execution_id = request.matches.size() > 1 && request.matches[1].matched
                           ? std::string(request.matches[1])
                           : request.get_header_value("X-Flywheel-Execution");
  if (call->execution_id.empty()) {
    return refuse(absl::UnauthenticatedError(
        "name the execution: a base URL of /{execution_id}/v1, or an X-Flywheel-Execution "
        "header (POST /executions opens one)"));
  }
  const std::string role = request.matches.size() > 2 && request.matches[2].matched
                               ? std::string(request.matches[2])
                               : request.get_header_value("X-Flywheel-Role");
  if (!role.empty()) {
    absl::StatusOr<Role> parsed = ParseRole(role);
    if (!parsed.ok()) return refuse(parsed.status());
    call->role = *parsed;
  }
  if (absl::Status s = parts_.executions->Authorize(call->execution_id, BearerToken(request));
      !s.ok()) {
    return refuse(s);
  }
  absl::StatusOr<Json> body = ParseBody(request);
  if (!body.ok()) return refuse(body.status());
  absl::StatusOr<CallParams> params = ParseParams(*body, chat, parts_.sampling, options_);
  if (!params.ok()) return refuse(params.status());
  call->params = *std::move(params);
  const CallParams& p = call->params;
  absl::StatusOr<RenderedPrompt> prompt =
      chat ? parts_.renderer->Chat(p.messages, p.tools, p.template_kwargs)
           : parts_.renderer->Text(p.prompt);
  if (!prompt.ok()) return refuse(absl::InvalidArgumentError(prompt.status().message()));
  call->prompt = std::move(prompt->tokens);
  if (chat) {
    constexpr size_t kCallsMatched = 8;
    absl::StatusOr<std::vector<LlmCall>> earlier =
        parts_.executions->Calls(call->execution_id, kCallsMatched);
    if (!earlier.ok()) return refuse(earlier.status());
    MatchedContext matched = MatchContext(std::move(call->prompt), prompt->text, *earlier,
                                          parts_.renderer->tokenizer(), kCallsMatched);
    if (matched.match == ContextMatch::kText) contexts_matched_.fetch_add(1);
    if (matched.match == ContextMatch::kRerendered) contexts_rerendered_.fetch_add(1);
    call->prompt = std::move(matched.tokens);
  }
  const int64_t room = parts_.loop->max_seq_len() - static_cast<int64_t>(call->prompt.size());
  if (room < 1 || (p.max_tokens > 0 && p.max_tokens > room)) {
    refused_.fetch_add(1);
    return WriteError(response, 400, "invalid_request_error",
                      StrCat("the prompt is ", call->prompt.size(), " tokens and max_tokens ",
                             p.max_tokens > 0 ? StrCat(p.max_tokens) : "at least 1",
                             "; the model's context is ", parts_.loop->max_seq_len(), " tokens"),
                      "messages", "context_length_exceeded");
  }
  GenerationRequest base;
  base.prompt = call->prompt;
  base.sampling = p.sampling;
  base.turn.max_new_tokens = p.max_tokens > 0 ? p.max_tokens : std::min(options_.max_tokens, room);
  base.turn.stop_tokens = parts_.renderer->stop_tokens();
  const uint64_t seed = p.seed ? *p.seed : std::random_device()();
  call->start_unix_ns = absl::ToUnixNanos(absl::Now());
  for (int64_t i = 0; i < p.n; ++i) {
    GenerationRequest r = base;
    r.seed = seed + static_cast<uint64_t>(i);
    Choice choice;
    choice.stream = parts_.loop->Submit(std::move(r));
    call->choices.push_back(std::move(choice));
  }
  call->id = StrCat(chat ? "chatcmpl-" : "cmpl-", call->execution_id, "-", next_call_.fetch_add(1));
  if (p.stream) return Stream(std::move(call), response);
  Answer(*call, response);
}

void GatewayServer::Record(const Call& call) {
  const int64_t end_unix_ns = absl::ToUnixNanos(absl::Now());
  for (const Choice& c : call.choices) {
    LlmCall llm;
    llm.role = call.role;
    llm.context.assign(call.prompt.begin(), call.prompt.end());
    for (const GeneratedToken& t : c.tokens) {
      llm.generated.push_back(static_cast<int32_t>(t.token));
      llm.logprobs.push_back(t.logprob);
      llm.versions.push_back(t.version);
    }
    llm.start_unix_ns = call.start_unix_ns;
    llm.end_unix_ns = end_unix_ns;
    if (absl::Status s = parts_.executions->Record(call.execution_id, std::move(llm)); !s.ok()) {
      spdlog::warn("gateway: {} not recorded: {}", call.id, s.ToString());
    }
  }
}

AssistantOutput GatewayServer::Parse(const Call& call, size_t i) const {
  const bool tools = call.params.tools.is_array() && !call.params.tools.empty();
  return ParseAssistantOutput(call.choices[i].text,
                              tools ? parts_.renderer->tool_call_format() : ToolCallFormat::kNone,
                              StrCat("call_", call.id, "_", i));
}

nlohmann::ordered_json GatewayServer::ChoiceJson(const Call& call, size_t i) const {
  const Choice& c = call.choices[i];
  const std::vector<GeneratedToken> shown = VisibleTokens(c);
  if (call.chat) {
    const AssistantOutput out = Parse(call, i);
    Json logprobs = nullptr;
    if (call.params.logprobs) {
      logprobs = {{"content", Json::array()}};
      for (const GeneratedToken& t : shown) {
        logprobs["content"].push_back(TokenLogprob(*parts_.renderer, t));
      }
    }
    return {{"index", i},
            {"message", ToOpenAIMessage(out)},
            {"logprobs", logprobs},
            {"finish_reason", FinishReason(out, c.finish_reason)}};
  }
  Json logprobs = nullptr;
  if (call.params.logprobs) {
    logprobs = {{"tokens", Json::array()},
                {"token_logprobs", Json::array()},
                {"top_logprobs", nullptr},
                {"text_offset", Json::array()}};
    size_t offset = 0;
    for (const GeneratedToken& t : shown) {
      const std::string text = parts_.renderer->Decode({t.token}).value_or("");
      logprobs["tokens"].push_back(text);
      logprobs["token_logprobs"].push_back(t.logprob);
      logprobs["text_offset"].push_back(offset);
      offset += text.size();
    }
  }
  return {
      {"index", i}, {"text", c.text}, {"logprobs", logprobs}, {"finish_reason", c.finish_reason}};
}

nlohmann::ordered_json GatewayServer::Usage(const Call& call) const {
  int64_t completion = 0;
  for (const Choice& c : call.choices) completion += static_cast<int64_t>(c.tokens.size());
  const int64_t prompt = static_cast<int64_t>(call.prompt.size());
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

void GatewayServer::Answer(Call& call, httplib::Response& response) {
  const absl::Time deadline = absl::Now() + kGenerationTimeout;
  for (Choice& c : call.choices) {
    const absl::Status s = Consume(c, *parts_.renderer, call.params.stop, deadline,
                                   [](std::string_view) { return true; });
    if (!s.ok()) {
      for (Choice& other : call.choices) other.stream->Cancel();
      refused_.fetch_add(1);
      return WriteStatus(response, s);
    }
  }
  Record(call);
  Json choices = Json::array();
  for (size_t i = 0; i < call.choices.size(); ++i) choices.push_back(ChoiceJson(call, i));
  const Json answer = {{"id", call.id},
                       {"object", call.chat ? "chat.completion" : "text_completion"},
                       {"created", UnixSeconds()},
                       {"model", call.model},
                       {"choices", std::move(choices)},
                       {"usage", Usage(call)}};
  response.set_content(Dump(answer), "application/json");
}

// Server-sent events as OpenAI streams them: per choice a first delta with the role, the text
// as it is generated, then a delta with the finish reason; a usage chunk when asked; [DONE].
// With tools, a choice's text is held until it ends and sent as one delta, so that tool calls
// arrive parsed (a partial <tool_call> block is not content).
void GatewayServer::Stream(std::shared_ptr<Call> call, httplib::Response& response) {
  response.set_header("Cache-Control", "no-cache");
  response.set_chunked_content_provider("text/event-stream", [this, call](size_t,
                                                                          httplib::DataSink& sink) {
    const bool tools = call->chat && call->params.tools.is_array() && !call->params.tools.empty();
    auto send = [&](const Json& payload) {
      const std::string event = StrCat("data: ", Dump(payload), "\n\n");
      return sink.write(event.data(), event.size());
    };
    auto chunk = [&](size_t i, Json delta, Json finish) {
      Json choice = call->chat ? Json{{"index", i}, {"delta", std::move(delta)}}
                               : Json{{"index", i}, {"text", std::move(delta)}};
      choice["logprobs"] = nullptr;
      choice["finish_reason"] = std::move(finish);
      return Json{{"id", call->id},
                  {"object", call->chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", UnixSeconds()},
                  {"model", call->model},
                  {"choices", Json::array({std::move(choice)})}};
    };
    const absl::Time deadline = absl::Now() + kGenerationTimeout;
    for (size_t i = 0; i < call->choices.size(); ++i) {
      Choice& c = call->choices[i];
      bool open = !call->chat || send(chunk(i, {{"role", "assistant"}, {"content", ""}}, nullptr));
      auto on_text = [&](std::string_view delta) {
        if (tools) return true;
        return send(chunk(i, call->chat ? Json{{"content", delta}} : Json(delta), nullptr));
      };
      const absl::Status s =
          open ? Consume(c, *parts_.renderer, call->params.stop, deadline, on_text)
               : absl::CancelledError("the client closed the connection");
      if (!s.ok()) {
        for (Choice& other : call->choices) other.stream->Cancel();
        if (absl::IsCancelled(s)) {
          abandoned_.fetch_add(1);
          return false;
        }
        refused_.fetch_add(1);
        send({{"error", {{"message", std::string(s.message())}, {"type", "server_error"}}}});
        sink.done();
        return true;
      }
      if (call->chat) {
        const AssistantOutput out = Parse(*call, i);
        if (tools) {
          Json delta = ToOpenAIMessage(out);
          delta.erase("role");
          if (delta.contains("tool_calls")) {
            for (size_t k = 0; k < delta["tool_calls"].size(); ++k) {
              delta["tool_calls"][k]["index"] = k;
            }
          }
          send(chunk(i, std::move(delta), nullptr));
        }
        send(chunk(i, Json::object(), FinishReason(out, c.finish_reason)));
      } else {
        send(chunk(i, Json(""), c.finish_reason));
      }
    }
    Record(*call);
    if (call->params.include_usage) {
      send({{"id", call->id},
            {"object", call->chat ? "chat.completion.chunk" : "text_completion"},
            {"created", UnixSeconds()},
            {"model", call->model},
            {"choices", Json::array()},
            {"usage", Usage(*call)}});
    }
    constexpr std::string_view kDone = "data: [DONE]\n\n";
    sink.write(kDone.data(), kDone.size());
    sink.done();
    return true;
  });
}

}  // namespace flywheel::gateway
