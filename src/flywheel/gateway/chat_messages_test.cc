// OpenAI messages to what chat templates read, and the model's text back: with the real Qwen3
// and Llama 3 templates, whose output must parse back into the calls they rendered.
#include "flywheel/gateway/chat_messages.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::gateway {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using ::testing::HasSubstr;
using ::testing::Not;

fs::path TokenizerConfig(std::string_view model) {
  const char* source = std::getenv("FLYWHEEL_SOURCE_DIR");
  return fs::path(source != nullptr ? source : ".") / "third_party/tokenizers" / model /
         "tokenizer_config.json";
}

ChatTemplate LoadOrDie(std::string_view model) {
  const fs::path path = TokenizerConfig(model);
  absl::StatusOr<ChatTemplate> t = LoadChatTemplate(path.string());
  EXPECT_TRUE(t.ok()) << t.status() << " (run scripts/setup, which fetches the tokenizers)";
  return t.ok() ? *std::move(t) : *ChatTemplate::FromString("");
}

ChatTemplate FromStringOrDie(std::string_view text) {
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::FromString(text, {{"bos_token", "<|begin_of_text|>"}});
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : *ChatTemplate::FromString("");
}

// The tool-calling part of Llama 3.2's chat template (tools in the first user message), as
// meta-llama/Llama-3.2-1B-Instruct ships it; third_party's Llama 3 template predates tool calls.
constexpr std::string_view kLlama32ToolTemplate = R"({{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + strftime_now("%d %b %Y") + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- if tools is not none %}
    {%- set first_user_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {{- message.content }}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)";

const ordered_json kTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                   "unit": {"type": "string"}}}}},
  {"type": "function", "function": {"name": "get_time",
   "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}}])");

std::string Render(const ChatTemplate& t, const ordered_json& openai_messages) {
  absl::StatusOr<ordered_json> messages = ToTemplateMessages(openai_messages);
  EXPECT_TRUE(messages.ok()) << messages.status();
  ChatRenderOptions options;
  options.tools = kTools;
  absl::StatusOr<std::string> text = t.Render(messages.ok() ? *messages : ordered_json(), options);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

// The text of the last assistant turn: what the model wrote after `header`, up to `end`.
std::string LastTurn(std::string_view rendered, std::string_view header, std::string_view end) {
  const size_t begin = rendered.rfind(header);
  EXPECT_NE(begin, std::string_view::npos) << rendered;
  if (begin == std::string_view::npos) return "";
  const std::string_view turn = rendered.substr(begin + header.size());
  return std::string(turn.substr(0, turn.find(end)));
}

template <typename T>
std::string ErrorOf(const absl::StatusOr<T>& result) {
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  return std::string(result.status().message());
}

// --- DetectToolCallFormat ----------------------------------------------------------------------

TEST(DetectToolCallFormatTest, Qwen3WritesHermesBlocks) {
  absl::StatusOr<ToolCallFormat> format = DetectToolCallFormat(LoadOrDie("qwen3"));
  ASSERT_TRUE(format.ok()) << format.status();
  EXPECT_EQ(*format, ToolCallFormat::kHermes);
  EXPECT_EQ(ToolCallFormatName(*format), "hermes");
}

TEST(DetectToolCallFormatTest, ThirdPartyLlama3TemplateHasNoToolCalls) {
  // third_party's Llama 3 template prints each message's role and trimmed content only: an
  // assistant message's tool_calls vanish from the prompt, so no format can be read back.
  const ChatTemplate llama3 = LoadOrDie("llama3");
  EXPECT_THAT(Render(llama3, ordered_json::parse(R"([
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]}])")),
              Not(HasSubstr("get_weather")));
  absl::StatusOr<ToolCallFormat> format = DetectToolCallFormat(llama3);
  ASSERT_TRUE(format.ok()) << format.status();
  EXPECT_EQ(*format, ToolCallFormat::kNone);
}

TEST(DetectToolCallFormatTest, Llama32TemplateWritesTheTurnAsOneJsonObject) {
  absl::StatusOr<ToolCallFormat> format =
      DetectToolCallFormat(FromStringOrDie(kLlama32ToolTemplate));
  ASSERT_TRUE(format.ok()) << format.status();
  EXPECT_EQ(*format, ToolCallFormat::kLlama3Json);
  EXPECT_EQ(ToolCallFormatName(*format), "llama3_json");
}

TEST(DetectToolCallFormatTest, TemplateWithoutToolSupportIsNone) {
  absl::StatusOr<ToolCallFormat> format = DetectToolCallFormat(FromStringOrDie(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"));
  ASSERT_TRUE(format.ok()) << format.status();
  EXPECT_EQ(*format, ToolCallFormat::kNone);
}

TEST(DetectToolCallFormatTest, JsonCallAfterAMarkerIsNotLlama3Json) {
  // Mistral writes `[TOOL_CALLS][{…}]`: the call's JSON is there, but the model would not write
  // a bare object, and parsing it as one would leave the marker in the content.
  absl::StatusOr<ToolCallFormat> format = DetectToolCallFormat(FromStringOrDie(
      "{% for m in messages %}{% if m.tool_calls %}[TOOL_CALLS][{% for c in m.tool_calls %}"
      "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}"
      "{% endfor %}]{% else %}[{{ m.role }}]{{ m.content }}{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}[assistant]{% endif %}"));
  ASSERT_TRUE(format.ok()) << format.status();
  EXPECT_EQ(*format, ToolCallFormat::kNone);
}

TEST(DetectToolCallFormatTest, RenderErrorIsReturned) {
  absl::StatusOr<ToolCallFormat> format = DetectToolCallFormat(FromStringOrDie(
      "{% for m in messages %}{% if m.tool_calls %}{{ raise_exception('no tool calls here') }}"
      "{% endif %}{% endfor %}"));
  ASSERT_FALSE(format.ok());
  EXPECT_THAT(std::string(format.status().message()),
              HasSubstr("probing how the chat template writes tool calls"));
  EXPECT_THAT(std::string(format.status().message()), HasSubstr("no tool calls here"));
}

// --- Round trips through the real templates ----------------------------------------------------

TEST(ChatMessagesRoundTripTest, Qwen3RenderedCallsParseBackAndRenderTheSameText) {
  const ChatTemplate qwen3 = LoadOrDie("qwen3");
  const ordered_json conversation = ordered_json::parse(R"([
    {"role": "user", "content": "Weather and time in Oslo?"},
    {"role": "assistant", "content": "Let me look both up.",
     "reasoning_content": "Two lookups.\nOslo is in Norway.",
     "tool_calls": [
       {"id": "a", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"unit\": \"C\"}"}},
       {"id": "b", "type": "function",
        "function": {"name": "get_time", "arguments": "{\"zone\": \"Europe/Oslo\"}"}}]}])");
  const std::string rendered = Render(qwen3, conversation);
  const std::string turn = LastTurn(rendered, "<|im_start|>assistant\n", "<|im_end|>");
  EXPECT_THAT(turn, HasSubstr("<tool_call>\n{\"name\": \"get_weather\""));

  const AssistantOutput out = ParseAssistantOutput(turn, ToolCallFormat::kHermes, "call");
  EXPECT_EQ(out.reasoning_content, "Two lookups.\nOslo is in Norway.");
  EXPECT_EQ(out.content, "Let me look both up.");
  ASSERT_EQ(out.tool_calls.size(), 2u) << out.tool_calls.dump();
  EXPECT_EQ(out.tool_calls[0]["id"], "call_0");
  EXPECT_EQ(out.tool_calls[0]["type"], "function");
  EXPECT_EQ(out.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(ordered_json::parse(out.tool_calls[0]["function"]["arguments"].get<std::string>()),
            ordered_json::parse(R"({"city": "Oslo", "unit": "C"})"));
  EXPECT_EQ(out.tool_calls[1]["id"], "call_1");
  EXPECT_EQ(out.tool_calls[1]["function"]["name"], "get_time");
  EXPECT_EQ(ordered_json::parse(out.tool_calls[1]["function"]["arguments"].get<std::string>()),
            ordered_json::parse(R"({"zone": "Europe/Oslo"})"));

  // The parsed message, sent back by the client as history, renders the same prompt.
  ordered_json replayed = conversation;
  replayed[1] = ToOpenAIMessage(out);
  EXPECT_EQ(Render(qwen3, replayed), rendered);
}

TEST(ChatMessagesRoundTripTest, Llama32RenderedCallParsesBack) {
  const ChatTemplate llama = FromStringOrDie(kLlama32ToolTemplate);
  const ordered_json conversation = ordered_json::parse(R"([
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function",
     "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"unit\": \"C\"}"}}]}])");
  const std::string rendered = Render(llama, conversation);
  const std::string turn =
      LastTurn(rendered, "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>");
  EXPECT_EQ(turn, R"({"name": "get_weather", "parameters": {"city": "Oslo", "unit": "C"}})");

  const AssistantOutput out = ParseAssistantOutput(turn, ToolCallFormat::kLlama3Json, "call");
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(out.tool_calls[0]["function"]["arguments"], R"({"city":"Oslo","unit":"C"})");
  ordered_json replayed = conversation;
  replayed[1] = ToOpenAIMessage(out);
  EXPECT_EQ(Render(llama, replayed), rendered);
}

// --- ParseAssistantOutput ----------------------------------------------------------------------

TEST(ParseAssistantOutputTest, LeadingThinkBlockIsReasoning) {
  const AssistantOutput out = ParseAssistantOutput(
      "<think>\nThe user greets me.\n</think>\n\nHello!\n", ToolCallFormat::kNone, "c");
  EXPECT_EQ(out.reasoning_content, "The user greets me.");
  EXPECT_EQ(out.content, "Hello!\n");
  EXPECT_TRUE(out.tool_calls.empty());

  // Thinking switched off: Qwen3's prompt already holds the empty block, the text has none.
  const AssistantOutput plain = ParseAssistantOutput("Hi <think>", ToolCallFormat::kHermes, "c");
  EXPECT_EQ(plain.reasoning_content, "");
  EXPECT_EQ(plain.content, "Hi <think>");
}

TEST(ParseAssistantOutputTest, UnclosedThinkBlockCutOffByLengthIsAllReasoning) {
  const AssistantOutput out =
      ParseAssistantOutput("<think>\nFirst, the city is", ToolCallFormat::kHermes, "c");
  EXPECT_EQ(out.reasoning_content, "First, the city is");
  EXPECT_EQ(out.content, "");
  EXPECT_EQ(FinishReason(out, "length"), "length");
}

TEST(ParseAssistantOutputTest, HermesCallsBecomeToolCallsInOrder) {
  const AssistantOutput out = ParseAssistantOutput(
      "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", "
      "\"days\": [1, 2]}}\n</tool_call>\n<tool_call>{\"name\": \"get_time\", \"parameters\": "
      "{\"zone\": \"CET\"}}</tool_call>\n<tool_call>{\"name\": \"ping\"}</tool_call>",
      ToolCallFormat::kHermes, "chatcmpl-7");
  EXPECT_EQ(out.content, "Checking.");
  EXPECT_EQ(out.tool_calls, ordered_json::parse(R"([
    {"id": "chatcmpl-7_0", "type": "function",
     "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\",\"days\":[1,2]}"}},
    {"id": "chatcmpl-7_1", "type": "function",
     "function": {"name": "get_time", "arguments": "{\"zone\":\"CET\"}"}},
    {"id": "chatcmpl-7_2", "type": "function",
     "function": {"name": "ping", "arguments": "{}"}}])"));
  EXPECT_EQ(FinishReason(out, "stop"), "tool_calls");
}

TEST(ParseAssistantOutputTest, MalformedHermesBlockStaysInContent) {
  const std::string bad =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n"
      "</tool_call>";
  const std::string no_name = "<tool_call>{\"arguments\": {}}</tool_call>";
  const AssistantOutput out = ParseAssistantOutput(
      bad + "\n" + no_name + "\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
      ToolCallFormat::kHermes, "c");
  EXPECT_EQ(out.content, bad + "\n" + no_name);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0]["id"], "c_0");
  EXPECT_EQ(out.tool_calls[0]["function"]["name"], "get_time");

  // Nothing well formed: the whole text is content, untouched, and the turn just stops.
  const std::string truncated = "Sure.\n<tool_call>\n{\"name\": \"get_wea";
  const AssistantOutput cut = ParseAssistantOutput(truncated, ToolCallFormat::kHermes, "c");
  EXPECT_EQ(cut.content, truncated);
  EXPECT_TRUE(cut.tool_calls.empty());
  EXPECT_EQ(FinishReason(cut, "length"), "length");
}

TEST(ParseAssistantOutputTest, UnclosedLastHermesBlockWithAWholeCallCounts) {
  // An engine that stops on "</tool_call>" leaves it out of the text.
  const AssistantOutput out = ParseAssistantOutput(
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n",
      ToolCallFormat::kHermes, "c");
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0]["function"]["arguments"], R"({"zone":"UTC"})");
}

TEST(ParseAssistantOutputTest, Llama3JsonIsOneCallOrContent) {
  const AssistantOutput tagged = ParseAssistantOutput(
      " <|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}\n",
      ToolCallFormat::kLlama3Json, "c");
  EXPECT_EQ(tagged.content, "");
  ASSERT_EQ(tagged.tool_calls.size(), 1u);
  EXPECT_EQ(tagged.tool_calls[0]["id"], "c_0");
  EXPECT_EQ(tagged.tool_calls[0]["function"]["arguments"], R"({"city":"Oslo"})");

  const AssistantOutput with_arguments = ParseAssistantOutput(
      R"({"name": "get_time", "arguments": {"zone": "CET"}})", ToolCallFormat::kLlama3Json, "c");
  ASSERT_EQ(with_arguments.tool_calls.size(), 1u);
  EXPECT_EQ(with_arguments.tool_calls[0]["function"]["name"], "get_time");

  for (const std::string text : {"The weather in Oslo is mild.", R"({"answer": 42})",
                                 R"(Calling {"name": "get_time", "parameters": {}})",
                                 R"({"name": "get_time", "parameters": [1]})"}) {
    const AssistantOutput out = ParseAssistantOutput(text, ToolCallFormat::kLlama3Json, "c");
    EXPECT_EQ(out.content, text);
    EXPECT_TRUE(out.tool_calls.empty()) << text;
  }
}

TEST(ParseAssistantOutputTest, NoneFormatKeepsCallsAsContent) {
  const std::string text = "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
  const AssistantOutput out = ParseAssistantOutput(text, ToolCallFormat::kNone, "c");
  EXPECT_EQ(out.content, text);
  EXPECT_TRUE(out.tool_calls.empty());
}

TEST(ParseAssistantOutputTest, ArbitraryBytesNeverThrow) {
  for (const std::string& text :
       {std::string("<tool_call>{\"name\": \"\xff\xfe\"}</tool_call>"),
        std::string("<tool_call>") + std::string(10000, '[') + "</tool_call>",
        std::string("<think><think></think></think><tool_call></tool_call></tool_call>"),
        std::string("\0{\"name\"\0", 9)}) {
    for (ToolCallFormat format :
         {ToolCallFormat::kNone, ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json}) {
      const AssistantOutput out = ParseAssistantOutput(text, format, "c");
      EXPECT_TRUE(out.tool_calls.empty()) << ToolCallFormatName(format);
    }
  }
}

TEST(ParseAssistantOutputTest, OpenAIMessageHasNullContentWithCallsOnly) {
  AssistantOutput out = ParseAssistantOutput(
      "<think>\nhm\n</think>\n\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
      ToolCallFormat::kHermes, "c");
  EXPECT_EQ(ToOpenAIMessage(out), ordered_json::parse(R"({"role": "assistant", "content": null,
    "reasoning_content": "hm", "tool_calls": [{"id": "c_0", "type": "function",
    "function": {"name": "f", "arguments": "{}"}}]})"));
  out = ParseAssistantOutput("Hello", ToolCallFormat::kHermes, "c");
  EXPECT_EQ(ToOpenAIMessage(out),
            ordered_json::parse(R"({"role": "assistant", "content": "Hello"})"));
  EXPECT_EQ(FinishReason(out, "stop"), "stop");
}

// --- ToTemplateMessages -------------------------------------------------------------------------

TEST(ToTemplateMessagesTest, ConvertsOpenAIShapes) {
  absl::StatusOr<ordered_json> messages = ToTemplateMessages(ordered_json::parse(R"([
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Weather"}, {"type": "text", "text": "in Oslo?"}],
     "name": "ann"},
    {"role": "assistant", "content": null, "reasoning_content": "Look it up.",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"unit\": \"C\", \"city\": \"Oslo\"}"}},
                    {"id": "call_2", "type": "function",
                     "function": {"name": "get_time", "arguments": ""}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "3 C"},
    {"role": "tool", "tool_call_id": "call_2", "name": "clock", "content": [{"type": "text", "text": "noon"}]},
    {"role": "assistant", "content": "Mild.", "tool_calls": [], "reasoning_content": null}])"));
  ASSERT_TRUE(messages.ok()) << messages.status();
  // Key order is the client's: templates print arguments with tojson, in insertion order.
  EXPECT_EQ(messages->dump(), ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather\nin Oslo?", "name": "ann"},
    {"role": "assistant", "content": "",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"unit": "C", "city": "Oslo"}}},
                    {"id": "call_2", "type": "function",
                     "function": {"name": "get_time", "arguments": {}}}],
     "reasoning_content": "Look it up."},
    {"role": "tool", "content": "3 C", "tool_call_id": "call_1", "name": "get_weather"},
    {"role": "tool", "content": "noon", "name": "clock", "tool_call_id": "call_2"},
    {"role": "assistant", "content": "Mild."}])")
                                  .dump());
}

TEST(ToTemplateMessagesTest, ErrorsNameTheMessageAndField) {
  EXPECT_THAT(ErrorOf(ToTemplateMessages(ordered_json::array())),
              HasSubstr("messages must be a non-empty array"));
  EXPECT_THAT(ErrorOf(ToTemplateMessages(ordered_json::object())),
              HasSubstr("messages must be a non-empty array"));
  EXPECT_THAT(ErrorOf(ToTemplateMessages(ordered_json::parse(R"([
      {"role": "user", "content": "a"}, {"role": "user", "content": "b"},
      {"role": "foo", "content": "c"}])"))),
              HasSubstr("messages[2].role must be one of system, developer, user, assistant, tool "
                        "(got \"foo\")"));
  EXPECT_THAT(ErrorOf(ToTemplateMessages(ordered_json::parse(R"([{"content": "c"}])"))),
              HasSubstr("messages[0].role must be one of"));
  EXPECT_THAT(
      ErrorOf(ToTemplateMessages(ordered_json::parse(R"([{"role": "user", "content": "a"},
      {"role": "user", "content": [{"type": "text", "text": "see"},
                                   {"type": "image_url", "image_url": {"url": "x"}}]}])"))),
      HasSubstr("messages[1].content[1] has type \"image_url\": the model behind this gateway "
                "reads text only"));
  EXPECT_THAT(ErrorOf(ToTemplateMessages(ordered_json::parse(
                  R"([{"role": "user", "content": [{"type": "text", "text": 3}]}])"))),
              HasSubstr("messages[0].content[0].text must be a string (got 3)"));
  EXPECT_THAT(
      ErrorOf(ToTemplateMessages(ordered_json::parse(R"([{"role": "user", "content": null}])"))),
      HasSubstr("messages[0].content is missing or null"));
  EXPECT_THAT(ErrorOf(ToTemplateMessages(ordered_json::parse(R"([{"role": "user", "content": "a"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "y", "type": "function", "function": {"name": "f", "arguments": "{\"a\": "}}]}])"))),
              HasSubstr("messages[1].tool_calls[1].function.arguments is not valid JSON"));
  EXPECT_THAT(ErrorOf(ToTemplateMessages(ordered_json::parse(R"([
      {"role": "assistant", "content": null, "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": "[1, 2]"}}]}])"))),
              HasSubstr("messages[0].tool_calls[0].function.arguments must hold a JSON object "
                        "(got array)"));
  EXPECT_THAT(ErrorOf(ToTemplateMessages(ordered_json::parse(R"([
      {"role": "assistant", "content": null, "tool_calls": [
        {"type": "function", "function": {"arguments": "{}"}}]}])"))),
              HasSubstr("messages[0].tool_calls[0].function.name must be a non-empty string"));
  EXPECT_THAT(ErrorOf(ToTemplateMessages(ordered_json::parse(R"([
      {"role": "user", "content": "a", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": "{}"}}]}])"))),
              HasSubstr("messages[0].tool_calls is allowed on assistant messages only"));
  EXPECT_THAT(ErrorOf(ToTemplateMessages(ordered_json::parse(R"([
      {"role": "tool", "content": "a", "tool_call_id": 7}])"))),
              HasSubstr("messages[0].tool_call_id must be a string (got 7)"));
}

// --- Tools ---------------------------------------------------------------------------------------

TEST(ToTemplateToolsTest, PassesTheOpenAIListThroughAndNamesTheBadTool) {
  absl::StatusOr<ordered_json> tools = ToTemplateTools(kTools);
  ASSERT_TRUE(tools.ok()) << tools.status();
  EXPECT_EQ(tools->dump(), kTools.dump());
  absl::StatusOr<ordered_json> none = ToTemplateTools(ordered_json::array());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->is_null());

  EXPECT_THAT(std::string(ValidateTools(ordered_json::object()).message()),
              HasSubstr("tools must be an array"));
  ordered_json bad = kTools;
  bad[1]["function"].erase("name");
  EXPECT_THAT(std::string(ValidateTools(bad).message()),
              HasSubstr("tools[1].function.name must be a non-empty string"));
  bad = kTools;
  bad[0]["type"] = "retrieval";
  EXPECT_THAT(std::string(ValidateTools(bad).message()),
              HasSubstr("tools[0].type must be \"function\" (got \"retrieval\")"));
  bad = kTools;
  bad[1]["function"]["parameters"] = "none";
  EXPECT_THAT(ErrorOf(ToTemplateTools(bad)),
              HasSubstr("tools[1].function.parameters must be a JSON schema object"));
  bad = kTools;
  bad[0]["function"]["description"] = 5;
  EXPECT_THAT(std::string(ValidateTools(bad).message()),
              HasSubstr("tools[0].function.description must be a string (got 5)"));
}

}  // namespace
}  // namespace flywheel::gateway
