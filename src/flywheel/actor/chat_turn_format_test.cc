// The chat turn format with the real Qwen3 and Llama-3 tokenizers and templates (fetched by
// scripts/setup into third_party/tokenizers/): the tokens of an episode decode to the text the
// chat template gives the same conversation, and only the policy's tokens are trainable.
#include "flywheel/actor/chat_turn_format.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "flywheel/chat/chat_episode.h"
#include "flywheel/core/strings.h"
#include "flywheel/tokenizer/hf_tokenizer.h"

namespace flywheel {
namespace {

using nlohmann::ordered_json;

struct Model {
  std::unique_ptr<HfTokenizer> tokenizer;
  ChatTemplate chat_template;
};

Model Load(const std::string& name) {
  const char* source = std::getenv("FLYWHEEL_SOURCE_DIR");
  const std::filesystem::path dir =
      std::filesystem::path(source != nullptr ? source : ".") / "third_party/tokenizers" / name;
  EXPECT_TRUE(std::filesystem::exists(dir / "tokenizer.json"))
      << dir << " is missing: run scripts/setup, which fetches the " << name << " tokenizer";
  HfTokenizerOptions options;
  options.tokenizer_config = (dir / "tokenizer_config.json").string();
  auto tokenizer = LoadHfTokenizer((dir / "tokenizer.json").string(), options);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto chat_template = LoadChatTemplate((dir / "tokenizer_config.json").string());
  EXPECT_TRUE(chat_template.ok()) << chat_template.status();
  return Model{std::move(*tokenizer), std::move(*chat_template)};
}

ordered_json User(const std::string& text) { return {{"role", "user"}, {"content", text}}; }
ordered_json Assistant(const std::string& text) {
  return {{"role", "assistant"}, {"content", text}};
}

// Plays prompt, policy answers and replies through the format, as the actor does, and checks
// the text against a ChatEpisode of the same conversation, segment by segment.
void CheckEpisode(const Model& m, const std::vector<std::string>& replies,
                  const std::vector<std::string>& answers) {
  auto format = ChatTurnFormat::Create(&m.chat_template, m.tokenizer.get());
  ASSERT_TRUE(format.ok()) << format.status();
  auto episode = ChatEpisode::Start(&m.chat_template, ordered_json::array({User(replies[0])}), {});
  ASSERT_TRUE(episode.ok()) << episode.status();
  Trajectory t;
  for (size_t turn = 0; turn < replies.size(); ++turn) {
    if (turn > 0) {
      ASSERT_TRUE(episode->AddEnvironmentMessages(ordered_json::array({User(replies[turn])})).ok());
    }
    auto env = (*format)->EnvironmentTurn(t, replies[turn]);
    ASSERT_TRUE(env.ok()) << env.status();
    for (int64_t id : *env) t.AppendPrompt(static_cast<int32_t>(id));
    // The policy answers, ending its turn with the first stop token.
    auto answer = m.tokenizer->Encode(answers[turn]);
    ASSERT_TRUE(answer.ok());
    answer->push_back((*format)->stop_tokens()[0]);
    for (int64_t id : *answer) t.AppendGenerated(static_cast<int32_t>(id), -1.0f, 0);
    auto text = m.tokenizer->Decode(*answer);
    ASSERT_TRUE(text.ok());
    ASSERT_TRUE(episode->AddPolicyTurn(*text, Assistant(answers[turn])).ok());
  }
  std::vector<int64_t> ids(t.tokens.begin(), t.tokens.end());
  auto whole = m.tokenizer->Decode(ids);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*whole, episode->Text());
  // The trainable tokens are exactly the policy's segments.
  std::string trainable_text, episode_policy_text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (t.trainable[i]) trainable_text += *m.tokenizer->Decode({ids[i]});
  }
  for (const ChatSegment& s : episode->segments()) {
    if (s.is_policy) episode_policy_text += s.text;
  }
  EXPECT_EQ(trainable_text, episode_policy_text);
}

TEST(ChatTurnFormatTest, Qwen3EpisodeIsTheTemplatesTextAndOnlyThePolicyTrains) {
  const Model m = Load("qwen3");
  auto format = ChatTurnFormat::Create(&m.chat_template, m.tokenizer.get());
  ASSERT_TRUE(format.ok()) << format.status();
  EXPECT_EQ((*format)->stop_tokens(), std::vector<int64_t>{*m.tokenizer->TokenId("<|im_end|>")});
  CheckEpisode(m, {"Guess a number in [0, 16).", "lower", "higher"}, {"8", "4", "6"});
  auto first = (*format)->EnvironmentText(/*first=*/true, true, "Guess.");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, "<|im_start|>user\nGuess.<|im_end|>\n<|im_start|>assistant\n");
  auto reply = (*format)->EnvironmentText(false, /*stopped=*/true, "lower");
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(*reply, "\n<|im_start|>user\nlower<|im_end|>\n<|im_start|>assistant\n");
}

// A turn that max_new_tokens cut before its stop token: the template closes it, and the
// closing token is the environment's, not trainable.
TEST(ChatTurnFormatTest, ACutTurnIsClosedByTheEnvironmentsTokens) {
  const Model m = Load("qwen3");
  auto format = ChatTurnFormat::Create(&m.chat_template, m.tokenizer.get());
  ASSERT_TRUE(format.ok()) << format.status();
  Trajectory t;
  auto first = (*format)->EnvironmentTurn(t, "Guess.");
  ASSERT_TRUE(first.ok());
  for (int64_t id : *first) t.AppendPrompt(static_cast<int32_t>(id));
  t.AppendGenerated(static_cast<int32_t>(*m.tokenizer->TokenId("8")), -1.0f, 0);
  auto reply = (*format)->EnvironmentTurn(t, "lower");
  ASSERT_TRUE(reply.ok());
  ASSERT_FALSE(reply->empty());
  EXPECT_EQ(reply->front(), *m.tokenizer->TokenId("<|im_end|>"));
}

// A stop token added from generation_config.json (Qwen3's <|endoftext|>) ends the turn, but the
// template closes the turn with its own <|im_end|>, which is the environment's.
TEST(ChatTurnFormatTest, AnAddedStopTokenEndsTheTurnAndTheTemplateClosesIt) {
  const Model m = Load("qwen3");
  auto format = ChatTurnFormat::Create(&m.chat_template, m.tokenizer.get());
  ASSERT_TRUE(format.ok()) << format.status();
  const int64_t im_end = *m.tokenizer->TokenId("<|im_end|>");
  const int64_t endoftext = *m.tokenizer->TokenId("<|endoftext|>");
  ASSERT_TRUE((*format)->AddStopTokens({im_end, endoftext}, "generation_config.json").ok());
  EXPECT_EQ((*format)->stop_tokens(), (std::vector<int64_t>{im_end, endoftext}));
  const absl::Status bad = (*format)->AddStopTokens({151669}, "g.json: eos_token_id");
  EXPECT_EQ(bad.message(),
            "g.json: eos_token_id: stop token 151669 is not an id of the tokenizer (0 to 151668)");
  Trajectory t;
  // Held by name: a range-for over `*StatusOr` returned by the call would iterate a vector whose
  // StatusOr was already destroyed (ASan: stack-use-after-scope).
  absl::StatusOr<std::vector<int64_t>> first = (*format)->EnvironmentTurn(t, "Guess.");
  ASSERT_TRUE(first.ok()) << first.status();
  for (int64_t id : *first) t.AppendPrompt(static_cast<int32_t>(id));
  t.AppendGenerated(static_cast<int32_t>(*m.tokenizer->TokenId("8")), -1.0f, 0);
  t.AppendGenerated(static_cast<int32_t>(endoftext), -1.0f, 0);
  auto reply = (*format)->EnvironmentTurn(t, "lower");
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(*m.tokenizer->Decode(*reply),
            "<|im_end|>\n<|im_start|>user\nlower<|im_end|>\n<|im_start|>assistant\n");
}

// Llama-3's template trims message content, so the format renders each reply instead of
// placing it verbatim; the text is still the template's.
TEST(ChatTurnFormatTest, Llama3TrimmedRepliesAreRenderedByTheTemplate) {
  const Model m = Load("llama3");
  auto format = ChatTurnFormat::Create(&m.chat_template, m.tokenizer.get());
  ASSERT_TRUE(format.ok()) << format.status();
  EXPECT_EQ((*format)->stop_tokens().front(), *m.tokenizer->TokenId("<|eot_id|>"));
  auto reply = (*format)->EnvironmentText(false, true, "  lower \n");
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(*reply,
            "<|start_header_id|>user<|end_header_id|>\n\nlower<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  CheckEpisode(m, {"Guess a number.", "lower"}, {"8", "4"});
}

}  // namespace
}  // namespace flywheel
