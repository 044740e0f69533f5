// The gateway over HTTP with the real Qwen3 tokenizer and chat template (scripts/setup) and a tiny
// random model: what a client gets and what is recorded are the engine's own tokens, and every
// malformed or unauthorised request gets OpenAI's error shape and status, with nothing recorded.
#include "flywheel/gateway/gateway_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/actor/chat_turn_format.h"
#include "flywheel/core/clock.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/tokenizer/hf_tokenizer.h"

namespace flywheel::gateway {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

fs::path Qwen3Dir() {
  const char* source = std::getenv("FLYWHEEL_SOURCE_DIR");
  return fs::path(source != nullptr ? source : ".") / "third_party/tokenizers/qwen3";
}

// One gateway on a free port, shared by the tests (the model and tokenizer take a second).
class GatewayServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { fixture_ = new Fixture(); }
  static void TearDownTestSuite() { delete fixture_; }

  struct Fixture {
    Fixture() {
      HfTokenizerOptions tokenizer_options;
      tokenizer_options.tokenizer_config = (Qwen3Dir() / "tokenizer_config.json").string();
      tokenizer = *LoadHfTokenizer((Qwen3Dir() / "tokenizer.json").string(), tokenizer_options);
      chat_template = std::make_unique<ChatTemplate>(
          *LoadChatTemplate((Qwen3Dir() / "tokenizer_config.json").string()));
      format = *ChatTurnFormat::Create(chat_template.get(), tokenizer.get());
      ModelOptions o;
      o.vocab_size = 151936;
      o.hidden_size = 16;
      o.num_layers = 1;
      o.num_heads = 2;
      o.num_kv_heads = 1;
      o.intermediate_size = 32;
      o.max_seq_len = 512;
      snapshot = *MakeSnapshot(*MakeTransformer(o), 0);
      renderer = *PromptRenderer::Create(tokenizer.get(), chat_template.get(), format.get());
      loop = *GenerationLoop::Start(*RolloutEngine::Create({}, snapshot), {});
      GatewayOptions options;
      options.address = "127.0.0.1:0";
      options.max_request_bytes = 64 << 10;
      options.max_tokens = 8;
      EnvOptions env_options;  // the guess task, 1 ms a step
      env_options.latency.model = LatencyKind::kConstant;
      env_options.latency.mean_ms = 1;
      factory = *EnvFactory::Create(env_options, RealClock());
      env = std::make_unique<EnvSessions>(factory.get());
      GatewayServer::Parts parts;
      parts.loop = loop.get();
      parts.executions = &executions;
      parts.env = env.get();
      parts.renderer = renderer.get();
      parts.admin_token = "admin-secret";
      server = *GatewayServer::Start(options, parts);
      const std::string address = server->address();
      const size_t colon = address.rfind(':');
      client = std::make_unique<httplib::Client>(address.substr(0, colon),
                                                 std::stoi(address.substr(colon + 1)));
      client->set_read_timeout(60, 0);
    }

    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<ChatTemplate> chat_template;
    std::unique_ptr<ChatTurnFormat> format;
    std::shared_ptr<const WeightSnapshot> snapshot;
    std::unique_ptr<PromptRenderer> renderer;
    absl::Mutex mu;
    std::vector<Execution> finished ABSL_GUARDED_BY(mu);
    ExecutionRegistry executions{[this](Execution e) {
      absl::MutexLock lock(&mu);
      finished.push_back(std::move(e));
      return absl::OkStatus();
    }};
    std::unique_ptr<GenerationLoop> loop;
    std::unique_ptr<EnvFactory> factory;
    std::unique_ptr<EnvSessions> env;
    std::unique_ptr<GatewayServer> server;
    std::unique_ptr<httplib::Client> client;
  };

  void SetUp() override {
    ASSERT_TRUE(fs::exists(Qwen3Dir() / "tokenizer.json"))
        << Qwen3Dir() << " is missing: run scripts/setup, which fetches the Qwen3 tokenizer";
  }

  static OpenedExecution Open(const std::string& request = "{}") {
    httplib::Headers headers = {{"Authorization", "Bearer admin-secret"}};
    auto r = fixture_->client->Post("/executions", headers, request, "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    const Json body = Json::parse(r->body);
    return {body["execution_id"], body["token"]};
  }

  static httplib::Result Post(const std::string& path, const std::string& token,
                              const std::string& body) {
    return fixture_->client->Post(path, {{"Authorization", "Bearer " + token}}, body,
                                  "application/json");
  }

  // The error a refused request got: {status, type, code}.
  static std::tuple<int, std::string, std::string> Refusal(const httplib::Result& r) {
    if (!r) return {0, "no answer", ""};
    const Json body = Json::parse(r->body, nullptr, false);
    if (body.is_discarded() || !body.contains("error")) return {r->status, "not an error", r->body};
    const Json& e = body["error"];
    return {r->status, e["type"].get<std::string>(),
            e["code"].is_null() ? "" : e["code"].get<std::string>()};
  }

  static std::vector<LlmCall> Calls(const std::string& execution_id) {
    return *fixture_->executions.Calls(execution_id);
  }

  // The same request on an engine of its own: what a recorded call must equal.
  static std::vector<GeneratedToken> Direct(const std::vector<int64_t>& prompt,
                                            SamplingParams sampling, uint64_t seed,
                                            int64_t max_new) {
    auto engine = *RolloutEngine::Create({}, fixture_->snapshot);
    const SequenceId id = *engine->AddSequence(prompt, {.sampling = sampling, .seed = seed});
    EXPECT_TRUE(engine
                    ->StartTurn(id, {.max_new_tokens = max_new,
                                     .stop_tokens = fixture_->format->stop_tokens()})
                    .ok());
    std::vector<GeneratedToken> out;
    while (out.empty() || out.back().end == TurnEnd::kNone) {
      absl::StatusOr<std::vector<GeneratedToken>> step = engine->Step();
      EXPECT_TRUE(step.ok()) << step.status();
      if (!step.ok()) break;
      out.insert(out.end(), step->begin(), step->end());
    }
    return out;
  }

  static Fixture* fixture_;
};

GatewayServerTest::Fixture* GatewayServerTest::fixture_ = nullptr;

const Json kMessages = Json::array({{{"role", "user"}, {"content", "Hello there."}}});

TEST_F(GatewayServerTest, RecordedCallsAreTheEnginesTokensGreedyAndSampled) {
  const OpenedExecution e = Open();
  const std::vector<int64_t> prompt = fixture_->renderer->Chat(kMessages, nullptr, nullptr)->tokens;
  for (const double temperature : {0.0, 0.8}) {
    const Json request = {{"model", "m"},    {"messages", kMessages},
                          {"max_tokens", 6}, {"temperature", temperature},
                          {"seed", 11},      {"logprobs", true}};
    auto r = Post(StrCat("/", e.execution_id, "/v1/chat/completions"), e.token, request.dump());
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    const Json answer = Json::parse(r->body);
    EXPECT_EQ(answer["object"], "chat.completion");
    EXPECT_EQ(answer["usage"]["prompt_tokens"], prompt.size());
    SamplingParams sampling;
    if (temperature == 0) {
      sampling.top_k = 1;
    } else {
      sampling.temperature = temperature;
    }
    const std::vector<GeneratedToken> direct = Direct(prompt, sampling, 11, 6);
    const LlmCall recorded = Calls(e.execution_id).back();
    EXPECT_EQ(recorded.context, std::vector<int32_t>(prompt.begin(), prompt.end()));
    ASSERT_EQ(recorded.generated.size(), direct.size());
    for (size_t i = 0; i < direct.size(); ++i) {
      EXPECT_EQ(recorded.generated[i], direct[i].token) << "token " << i;
      EXPECT_FLOAT_EQ(recorded.logprobs[i], direct[i].logprob) << "token " << i;
      EXPECT_EQ(recorded.versions[i], 0);
    }
    // The client saw those tokens: their text and their log-probs.
    const Json& logprobs = answer["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(logprobs.size(), direct.size() - (direct.back().end == TurnEnd::kStopToken));
    EXPECT_FLOAT_EQ(logprobs[0]["logprob"].get<float>(), direct[0].logprob);
    std::vector<int64_t> ids;
    for (const GeneratedToken& t : direct) ids.push_back(t.token);
    EXPECT_EQ(answer["choices"][0]["message"]["content"], *fixture_->renderer->Decode(ids));
    EXPECT_EQ(answer["choices"][0]["finish_reason"],
              direct.back().end == TurnEnd::kStopToken ? "stop" : "length");
  }
}

TEST_F(GatewayServerTest, NChoicesAreSiblingCallsAndFinishHandsThemOver) {
  const OpenedExecution e = Open();
  const Json request = {{"messages", kMessages}, {"max_tokens", 4}, {"n", 3}, {"seed", 5}};
  auto r =
      Post(StrCat("/", e.execution_id, "/sub-agent/v1/chat/completions"), e.token, request.dump());
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  EXPECT_EQ(Json::parse(r->body)["choices"].size(), 3u);
  const std::vector<LlmCall> calls = Calls(e.execution_id);
  ASSERT_EQ(calls.size(), 3u);
  for (const LlmCall& c : calls) {
    EXPECT_EQ(c.role, Role::kSubAgent);
    EXPECT_EQ(c.context, calls[0].context);
  }
  EXPECT_NE(calls[0].generated, calls[1].generated);  // seeds 5, 6, 7
  auto finished = Post(StrCat("/", e.execution_id, "/finish"), e.token, R"({"reward": 0.5})");
  ASSERT_TRUE(finished && finished->status == 200) << (finished ? finished->body : "no answer");
  absl::MutexLock lock(&fixture_->mu);
  ASSERT_FALSE(fixture_->finished.empty());
  EXPECT_EQ(fixture_->finished.back().execution_id, e.execution_id);
  EXPECT_EQ(fixture_->finished.back().calls.size(), 3u);
  EXPECT_EQ(*fixture_->finished.back().final_reward, 0.5f);
}

TEST_F(GatewayServerTest, AStreamCarriesTheSameTextAsItsRecordedCallThenDone) {
  const OpenedExecution e = Open();
  const Json request = {{"messages", kMessages},
                        {"max_tokens", 6},
                        {"seed", 3},
                        {"stream", true},
                        {"stream_options", {{"include_usage", true}}}};
  auto r = Post(StrCat("/", e.execution_id, "/v1/chat/completions"), e.token, request.dump());
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  std::string content, finish;
  bool done = false, usage = false;
  for (absl::string_view line : absl::StrSplit(r->body, '\n', absl::SkipEmpty())) {
    ASSERT_TRUE(absl::ConsumePrefix(&line, "data: ")) << line;
    ASSERT_FALSE(done) << "an event after [DONE]";
    if (line == "[DONE]") {
      done = true;
      continue;
    }
    const Json chunk = Json::parse(line);
    if (chunk["choices"].empty()) {
      usage = chunk["usage"]["completion_tokens"] == 6 || chunk["usage"].contains("total_tokens");
      continue;
    }
    const Json& choice = chunk["choices"][0];
    if (choice["delta"].contains("content")) content += choice["delta"]["content"];
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  EXPECT_TRUE(done);
  EXPECT_TRUE(usage);
  EXPECT_FALSE(finish.empty());
  const LlmCall recorded = Calls(e.execution_id).back();
  const std::vector<int64_t> ids(recorded.generated.begin(), recorded.generated.end());
  EXPECT_EQ(content, *fixture_->renderer->Decode(ids));
}

TEST_F(GatewayServerTest, AStopStringEndsTheTurnAtTheTokenThatCompletedIt) {
  const OpenedExecution e = Open();
  // What the model writes with this seed, then a request that stops at its third character.
  const Json request = {{"messages", kMessages}, {"max_tokens", 8}, {"seed", 9}};
  auto first = Post(StrCat("/", e.execution_id, "/v1/chat/completions"), e.token, request.dump());
  ASSERT_TRUE(first && first->status == 200);
  const std::string text = Json::parse(first->body)["choices"][0]["message"]["content"];
  ASSERT_GE(text.size(), 4u) << text;
  Json stopped = request;
  stopped["stop"] = text.substr(2, 2);
  auto second = Post(StrCat("/", e.execution_id, "/v1/chat/completions"), e.token, stopped.dump());
  ASSERT_TRUE(second && second->status == 200);
  const Json choice = Json::parse(second->body)["choices"][0];
  EXPECT_EQ(choice["message"]["content"], text.substr(0, text.find(text.substr(2, 2))));
  EXPECT_EQ(choice["finish_reason"], "stop");
  const std::vector<LlmCall> calls = Calls(e.execution_id);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_LT(calls[1].generated.size(), calls[0].generated.size());
  EXPECT_TRUE(
      std::equal(calls[1].generated.begin(), calls[1].generated.end(), calls[0].generated.begin()));
}

TEST_F(GatewayServerTest, BadRequestsGetOpenAIErrorsAndRecordNothing) {
  const OpenedExecution e = Open();
  const OpenedExecution other = Open();
  const std::string path = StrCat("/", e.execution_id, "/v1/chat/completions");
  const std::string ok = Json{{"messages", kMessages}, {"max_tokens", 2}}.dump();
  using R = std::tuple<int, std::string, std::string>;
  EXPECT_EQ(Refusal(Post(path, other.token, ok)),
            R(401, "authentication_error", "invalid_api_key"));
  EXPECT_EQ(Refusal(Post(path, "", ok)), R(401, "authentication_error", "invalid_api_key"));
  EXPECT_EQ(Refusal(Post("/v1/chat/completions", e.token, ok)),
            R(401, "authentication_error", "invalid_api_key"));
  EXPECT_EQ(Refusal(Post("/nobody/v1/chat/completions", e.token, ok)),
            R(404, "not_found_error", ""));
  EXPECT_EQ(Refusal(Post(path, e.token, "{not json")), R(400, "invalid_request_error", ""));
  EXPECT_EQ(Refusal(Post(path, e.token, R"({"messages": []})")),
            R(400, "invalid_request_error", ""));
  EXPECT_EQ(Refusal(Post(path, e.token, R"({"messages": [{"role": "robot", "content": "x"}]})")),
            R(400, "invalid_request_error", ""));
  EXPECT_EQ(
      Refusal(Post(path, e.token, Json{{"messages", kMessages}, {"temperature", "hot"}}.dump())),
      R(400, "invalid_request_error", ""));
  EXPECT_EQ(Refusal(Post(path, e.token, Json{{"messages", kMessages}, {"n", 99}}.dump())),
            R(400, "invalid_request_error", ""));
  EXPECT_EQ(
      Refusal(Post(path, e.token, Json{{"messages", kMessages}, {"max_tokens", 100000}}.dump())),
      R(400, "invalid_request_error", "context_length_exceeded"));
  std::string words;
  for (int i = 0; i < 400; ++i) words += StrCat(" w", i);  // over 512 tokens
  const Json long_prompt = {{"messages", {{{"role", "user"}, {"content", words}}}}};
  EXPECT_EQ(Refusal(Post(path, e.token, long_prompt.dump())),
            R(400, "invalid_request_error", "context_length_exceeded"));
  EXPECT_EQ(Refusal(Post(path, e.token, std::string(100 << 10, ' '))),
            R(413, "invalid_request_error", ""));
  EXPECT_EQ(Refusal(Post(StrCat("/", e.execution_id, "/v1/embeddings"), e.token, ok)),
            R(404, "not_found_error", ""));
  EXPECT_EQ(Refusal(Post(StrCat("/", e.execution_id, "/finish"), e.token, R"({"reward": 1})")),
            R(400, "invalid_request_error", ""));  // no call made
  EXPECT_EQ(Refusal(fixture_->client->Post("/executions", "{}", "application/json")),
            R(401, "authentication_error", "invalid_api_key"));
  EXPECT_TRUE(Calls(e.execution_id).empty());
}

TEST_F(GatewayServerTest, AClientThatLeavesMidStreamIsCountedAndNotRecorded) {
  const OpenedExecution e = Open();
  const int64_t abandoned = fixture_->server->counts().abandoned;
  httplib::Request request;
  request.method = "POST";
  request.path = StrCat("/", e.execution_id, "/v1/chat/completions");
  request.headers = {{"Authorization", "Bearer " + e.token}, {"Content-Type", "application/json"}};
  request.body = Json{{"messages", kMessages}, {"max_tokens", 400}, {"stream", true}}.dump();
  int chunks = 0;
  request.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    return ++chunks < 2;  // hang up after the second piece
  };
  httplib::Response response;
  httplib::Error error;
  fixture_->client->send(request, response, error);
  for (int i = 0; i < 500 && fixture_->server->counts().abandoned == abandoned; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(fixture_->server->counts().abandoned, abandoned + 1);
  EXPECT_TRUE(Calls(e.execution_id).empty());
}

// The task scores an execution that played it, not its agent; a group plays one instance.
TEST_F(GatewayServerTest, TheEnvironmentScoresAnExecutionThatPlayedAnEpisode) {
  const OpenedExecution a = Open(R"({"group_id": "g1"})");
  const OpenedExecution b = Open(R"({"group_id": "g1"})");
  const std::string step = R"({"action": "7"})";
  EXPECT_EQ(std::get<0>(Refusal(Post(StrCat("/", a.execution_id, "/env/step"), a.token, step))),
            400);  // before a reset
  EXPECT_EQ(std::get<0>(Refusal(Post(StrCat("/", a.execution_id, "/env/reset"), b.token, "{}"))),
            401);  // another execution's token
  std::vector<Json> first_steps;
  for (const OpenedExecution& e : {a, b}) {
    auto reset = Post(StrCat("/", e.execution_id, "/env/reset"), e.token, "{}");
    ASSERT_TRUE(reset && reset->status == 200) << (reset ? reset->body : "no answer");
    EXPECT_EQ(Json::parse(reset->body)["task"], "guess");
    auto stepped = Post(StrCat("/", e.execution_id, "/env/step"), e.token, step);
    ASSERT_TRUE(stepped && stepped->status == 200) << (stepped ? stepped->body : "no answer");
    first_steps.push_back(Json::parse(stepped->body));
  }
  EXPECT_EQ(first_steps[0], first_steps[1]) << "one group, one instance";
  const Json chat = {{"messages", kMessages}, {"max_tokens", 2}, {"seed", 1}};
  ASSERT_EQ(Post(StrCat("/", a.execution_id, "/v1/chat/completions"), a.token, chat.dump())->status,
            200);
  // The agent cannot claim a reward for an execution its environment scores.
  EXPECT_EQ(Refusal(Post(StrCat("/", a.execution_id, "/finish"), a.token, R"({"reward": 1.0})")),
            std::make_tuple(400, std::string("invalid_request_error"), std::string()));
  auto finished = Post(StrCat("/", a.execution_id, "/finish"), a.token, "{}");
  ASSERT_TRUE(finished && finished->status == 200) << (finished ? finished->body : "no answer");
  const Json answer = Json::parse(finished->body);
  // One guess of the game: unless it found the number, the episode is not done and ends as a
  // timeout scored by its progress.
  const bool done = first_steps[0]["done"].get<bool>();
  EXPECT_EQ(answer["termination"], done ? "done" : "timeout");
  EXPECT_FLOAT_EQ(answer["reward"].get<float>(), first_steps[0]["reward"].get<float>());
  EXPECT_EQ(answer.contains("partial_score"), !done);
  absl::MutexLock lock(&fixture_->mu);
  EXPECT_EQ(fixture_->finished.back().execution_id, a.execution_id);
  EXPECT_EQ(fixture_->finished.back().termination,
            done ? Termination::kDone : Termination::kTimeout);
}

// gateway.execution_budget_s: an execution left open ends as a timeout scored by its environment,
// one that has nothing to train on is dropped, and neither takes calls afterwards.
TEST_F(GatewayServerTest, AnExecutionPastItsBudgetEndsAsATimeout) {
  std::vector<Execution> finished;
  ExecutionRegistry executions([&](Execution e) {
    finished.push_back(std::move(e));
    return absl::OkStatus();
  });
  EnvSessions env(fixture_->factory.get());
  GatewayOptions options;
  options.address = "127.0.0.1:0";
  options.execution_budget_s = 1.0;  // the calls below take milliseconds, even on a loaded machine
  GatewayServer::Parts parts;
  parts.loop = fixture_->loop.get();
  parts.executions = &executions;
  parts.env = &env;
  parts.renderer = fixture_->renderer.get();
  auto server = GatewayServer::Start(options, parts);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  httplib::Client client(address.substr(0, address.rfind(':')),
                         std::stoi(address.substr(address.rfind(':') + 1)));
  auto open = [&] {
    return Json::parse(client.Post("/executions", "{}", "application/json")->body);
  };
  const Json played = open();
  const Json idle = open();
  const httplib::Headers auth = {{"Authorization", "Bearer " + played["token"].get<std::string>()}};
  const std::string root = "/" + played["execution_id"].get<std::string>();
  ASSERT_EQ(client.Post(root + "/env/reset", auth, "{}", "application/json")->status, 200);
  // An answer the game calls invalid: the episode cannot end by finding the number.
  ASSERT_EQ(
      client.Post(root + "/env/step", auth, R"({"action": "not a number"})", "application/json")
          ->status,
      200);
  const Json chat = {{"messages", kMessages}, {"max_tokens", 2}};
  ASSERT_EQ(
      client.Post(root + "/v1/chat/completions", auth, chat.dump(), "application/json")->status,
      200);
  for (int i = 0; i < 500 && (*server)->counts().expired < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ((*server)->counts().expired, 2);
  ASSERT_EQ(finished.size(), 1u);  // the idle one made no call: dropped
  EXPECT_EQ(finished[0].execution_id, played["execution_id"]);
  EXPECT_EQ(finished[0].termination, Termination::kTimeout);
  EXPECT_TRUE(finished[0].partial_score.has_value());
  EXPECT_EQ(executions.counts().dropped, 1);
  EXPECT_EQ(
      client.Post(root + "/v1/chat/completions", auth, chat.dump(), "application/json")->status,
      404);
  const httplib::Headers idle_auth = {
      {"Authorization", "Bearer " + idle["token"].get<std::string>()}};
  EXPECT_EQ(client
                .Post("/" + idle["execution_id"].get<std::string>() + "/v1/chat/completions",
                      idle_auth, chat.dump(), "application/json")
                ->status,
            404);
}

// Qwen3's embedding table has 267 rows past the tokenizer; a sampled padding id has no text (as
// in HF's decode), where decoding it would fail the call.
TEST_F(GatewayServerTest, PaddingIdsHaveNoText) {
  const int64_t padding = fixture_->tokenizer->vocab_size() + 5;
  const int64_t hello = (*fixture_->tokenizer->Encode("Hello"))[0];
  EXPECT_EQ(*fixture_->renderer->Decode({hello, padding}), *fixture_->renderer->Decode({hello}));
}

TEST_F(GatewayServerTest, ModelsSaysHowPromptsAreRendered) {
  auto r = fixture_->client->Get("/v1/models");
  ASSERT_TRUE(r && r->status == 200);
  const Json model = Json::parse(r->body)["data"][0];
  EXPECT_EQ(model["id"], "flywheel");
  EXPECT_EQ(model["prompt_format"], "chat template");
  EXPECT_EQ(model["tool_call_format"], "hermes");
  EXPECT_EQ(model["max_model_len"], 512);
}

}  // namespace
}  // namespace flywheel::gateway
