#include "flywheel/runtime/policy_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "flywheel/actor/chat_turn_format.h"
#include "flywheel/runtime/policy_setup.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path Qwen3Dir() {
  const char* source = std::getenv("FLYWHEEL_SOURCE_DIR");
  return fs::path(source != nullptr ? source : ".") / "third_party/tokenizers/qwen3";
}

// A model directory with Qwen3's tokenizer files (the shape and weights are not read here).
class PolicyTextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(Qwen3Dir() / "tokenizer.json"))
        << Qwen3Dir() << " is missing: run scripts/setup, which fetches the Qwen3 tokenizer";
    dir_ = fs::temp_directory_path() / "flywheel_policy_text_test";
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(Qwen3Dir() / "tokenizer.json", dir_ / "tokenizer.json");
    fs::copy_file(Qwen3Dir() / "tokenizer_config.json", dir_ / "tokenizer_config.json");
    Write("generation_config.json", R"({"eos_token_id": [151645, 151643], "top_k": 20})");
    config_.model.path = dir_.string();
    factory_ = *EnvFactory::Create(config_.env);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }

  fs::path dir_;
  JobConfig config_;
  std::unique_ptr<EnvFactory> factory_;
};

TEST_F(PolicyTextTest, WithoutModelPathTheEnvironmentsTokenizerAndThePlainFormat) {
  config_.model.path.clear();
  auto text = MakePolicyText(config_, *factory_);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->chat_template, nullptr);
  EXPECT_EQ(text->tokenizer_name, "the guess tokenizer");
  EXPECT_NE(dynamic_cast<const PlainTurnFormat*>(text->turn_format.get()), nullptr);
  const SpecialTokens& special = text->tokenizer->special();
  EXPECT_EQ(text->turn_format->stop_tokens(),
            (std::vector<int64_t>{special.end_of_turn, special.eos}));
}

TEST_F(PolicyTextTest, AModelDirectoryGivesItsTokenizerTemplateAndStopTokens) {
  auto text = MakePolicyText(config_, *factory_);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->tokenizer_name, (dir_ / "tokenizer.json").string());
  EXPECT_EQ(text->tokenizer->vocab_size(), 151669);
  ASSERT_NE(dynamic_cast<const ChatTurnFormat*>(text->turn_format.get()), nullptr);
  // The template's end of turn first, then generation_config.json's other eos (<|endoftext|>).
  EXPECT_EQ(text->turn_format->stop_tokens(), (std::vector<int64_t>{151645, 151643}));
  EXPECT_EQ(text->tokenizer->special().end_of_turn, 151645);
  EXPECT_EQ(text->tokenizer->special().eos, 151645);  // tokenizer_config.json's eos_token
  auto prompt = text->turn_format->EnvironmentTurn(Trajectory{}, "go");
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(*text->tokenizer->Decode(*prompt),
            "<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_THAT(text->DebugString(), HasSubstr("<|im_end|> (151645), <|endoftext|> (151643)"));
}

TEST_F(PolicyTextTest, MissingTokenizerFilesAreNamed) {
  fs::remove(dir_ / "tokenizer.json");
  auto text = MakePolicyText(config_, *factory_);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(text.status().message(), HasSubstr((dir_ / "tokenizer.json").string()));
  fs::copy_file(Qwen3Dir() / "tokenizer.json", dir_ / "tokenizer.json");
  fs::remove(dir_ / "tokenizer_config.json");
  text = MakePolicyText(config_, *factory_);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(text.status().message(), HasSubstr((dir_ / "tokenizer_config.json").string()));
}

TEST_F(PolicyTextTest, AModelWithoutAChatTemplateIsRefusedNamingTheKey) {
  std::ifstream in(Qwen3Dir() / "tokenizer_config.json");
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(in);
  config.erase("chat_template");
  Write("tokenizer_config.json", config.dump());
  auto text = MakePolicyText(config_, *factory_);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(text.status().message(), HasSubstr("model.path " + dir_.string()));
  EXPECT_THAT(text.status().message(), HasSubstr("no \"chat_template\" key"));
}

TEST_F(PolicyTextTest, AnEosIdOutsideTheTokenizerNamesGenerationConfig) {
  Write("generation_config.json", R"({"eos_token_id": [151645, 200000]})");
  auto text = MakePolicyText(config_, *factory_);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(text.status().message(), HasSubstr("generation_config.json: eos_token_id"));
  EXPECT_THAT(text.status().message(), HasSubstr("200000"));
}

// The learner's check: config.json's vocab_size must cover tokenizer.json's ids.
TEST_F(PolicyTextTest, AModelVocabularySmallerThanTheTokenizersNamesBoth) {
  Write("config.json", R"({
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 1000,
    "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "max_position_embeddings": 4096, "tie_word_embeddings": true, "torch_dtype": "float32"})");
  auto text = MakePolicyText(config_, *factory_);
  ASSERT_TRUE(text.ok()) << text.status();
  auto model = ResolveModelOptions(config_, *text->tokenizer, text->tokenizer_name);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              HasSubstr(dir_.string() + "/config.json has vocab_size 1000, fewer ids than " +
                        dir_.string() + "/tokenizer.json's 151669"));
}

}  // namespace
}  // namespace flywheel
