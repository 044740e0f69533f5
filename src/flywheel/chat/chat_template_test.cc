// Loading tokenizer_config.json: the chat_template as a string or a list of named templates,
// which one transformers would pick, and the special tokens passed to the template.
#include "flywheel/chat/chat_template.h"

#include <filesystem>
#include <fstream>

#include "flywheel/core/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel {
namespace {

using nlohmann::ordered_json;
using ::testing::HasSubstr;

const ordered_json kMessages = ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");

std::string RenderOk(const ChatTemplate& t, const ChatRenderOptions& o = {}) {
  absl::StatusOr<std::string> text = t.Render(kMessages, o);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

TEST(ChatTemplateTest, NamedTemplatesPickDefaultOrToolUseAsTransformersDoes) {
  const ordered_json config = {
      {"chat_template",
       {{{"name", "default"}, {"template", "default:{{ messages[0].content }}"}},
        {{"name", "tool_use"}, {"template", "tools:{{ tools | length }}"}}}}};
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(config, "cfg.json");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(RenderOk(*t), "default:Hi");
  ChatRenderOptions with_tools;
  with_tools.tools = ordered_json::array({{{"type", "function"}}});
  EXPECT_EQ(RenderOk(*t, with_tools), "tools:1");

  absl::StatusOr<ChatTemplate> fixed =
      ChatTemplate::FromTokenizerConfig(config, "cfg.json", "default");
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(RenderOk(*fixed, with_tools), "default:Hi");

  absl::StatusOr<ChatTemplate> missing =
      ChatTemplate::FromTokenizerConfig(config, "cfg.json", "rag");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("cfg.json: no chat template named 'rag' (has default, tool_use)"));
}

TEST(ChatTemplateTest, SpecialTokensAreStringsOrAddedTokensAndAbsentOnesAreUndefined) {
  const ordered_json config = ordered_json::parse(R"({
    "bos_token": {"__type": "AddedToken", "content": "<s>", "special": true},
    "eos_token": "</s>", "unk_token": null,
    "additional_special_tokens": ["<a>", {"content": "<b>"}],
    "added_tokens_decoder": {"1": {"content": "<s>", "special": true},
                             "2": {"content": "</s>", "special": true},
                             "3": {"content": "<think>", "special": false},
                             "4": {"content": "<|long_end|>", "special": true}},
    "chat_template": "{{ bos_token }}|{{ eos_token }}|{{ unk_token is defined }}|{{ additional_special_tokens }}"
  })");
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(config, "cfg.json");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(RenderOk(*t), "<s>|</s>|False|['<a>', '<b>']");
  EXPECT_EQ(t->bos_token(), "<s>");
  EXPECT_EQ(t->eos_token(), "</s>");
  EXPECT_EQ(t->added_special_tokens(), (std::vector<std::string>{"<|long_end|>", "</s>", "<s>"}));
}

TEST(ChatTemplateTest, VariablesAndGenerationPromptReachTheTemplate) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromString(
      "{{ add_generation_prompt }} {{ enable_thinking | default('unset') }} {{ tools }} "
      "{{ documents }}");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(RenderOk(*t), "False unset None None");
  ChatRenderOptions o;
  o.add_generation_prompt = true;
  o.variables["enable_thinking"] = false;
  EXPECT_EQ(RenderOk(*t, o), "True False None None");
}

TEST(ChatTemplateTest, ErrorsNameTheFileAndTemplate) {
  absl::StatusOr<ChatTemplate> bad = ChatTemplate::FromTokenizerConfig(
      {{"chat_template", "line one\n{% for x in %}"}}, "model/tokenizer_config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("model/tokenizer_config.json: chat_template 'default': line 2:"));
  absl::StatusOr<ChatTemplate> none = ChatTemplate::FromTokenizerConfig({{"eos_token", "x"}}, "c");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);

  absl::StatusOr<ChatTemplate> raising =
      ChatTemplate::FromString("{{ raise_exception('System role not supported') }}");
  ASSERT_TRUE(raising.ok());
  absl::StatusOr<std::string> text = raising->Render(kMessages);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(text.status().message()),
              HasSubstr("raise_exception: System role not supported"));
}

// A tool call's arguments come from a policy's output; nested a million deep they overflowed the
// stack while becoming template values. Beyond 64 levels the render is refused.
TEST(ChatTemplateTest, DeeplyNestedMessagesAreRefused) {
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::FromString("{{ messages | length }}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  const std::string nested = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      StrCat(R"([{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f",
             "arguments": )", nested, "}}]}]"));
  absl::StatusOr<std::string> text = tmpl->Render(messages);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("messages nest deeper than 64"));
  ChatRenderOptions options;
  options.tools = nlohmann::ordered_json::parse(nested);
  EXPECT_THAT(std::string(tmpl->Render(kMessages, options).status().message()),
              HasSubstr("tools nest deeper than 64"));
  messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": [[[[1]]]]}])");
  EXPECT_EQ(*tmpl->Render(messages), "1");
}

// tokenizer_config.json comes with the model: an added token whose "special" is not a boolean was
// read with value("special", false), which threw type_error and ended the process.
TEST(ChatTemplateTest, AnAddedTokenWithANonBooleanSpecialIsNotSpecial) {
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::FromTokenizerConfig(
      {{"chat_template", "x"},
       {"added_tokens_decoder",
        {{"7", {{"content", "<a>"}, {"special", "yes"}}},
         {"8", {{"content", "<b>"}, {"special", true}}}}}},
      "c");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ(tmpl->added_special_tokens(), std::vector<std::string>{"<b>"});
}

TEST(ChatTemplateTest, LoadsChatTemplateJinjaBesideAConfigWithoutOne) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("flywheel_chat_template_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "</s>"})";
  std::ofstream(dir / "chat_template.jinja") << "{{ messages | length }}{{ eos_token }}\n";
  absl::StatusOr<ChatTemplate> t = LoadChatTemplate((dir / "tokenizer_config.json").string());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(RenderOk(*t), "1</s>");
  EXPECT_EQ(LoadChatTemplate("/nonexistent/tokenizer_config.json").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace flywheel
