#include "flywheel/tokenizer/hf_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "flywheel/core/strings.h"
#include "flywheel/tokenizer/reference_tokenizer.h"
#include "flywheel/tokenizer/test_tokenizer_json.h"

namespace flywheel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// --- tokenizer.json files made here: what loads, what is refused --------------------------

absl::StatusOr<std::unique_ptr<HfTokenizer>> LoadJson(const nlohmann::json& json,
                                                      HfTokenizerOptions options = {}) {
  return LoadHfTokenizer(testing::WriteJson(json, "tokenizer.json"), options);
}

void ExpectRefused(const nlohmann::json& json, std::string_view message) {
  auto tok = LoadJson(json);
  ASSERT_FALSE(tok.ok());
  EXPECT_THAT(std::string(tok.status().message()), HasSubstr(std::string(message)));
  EXPECT_THAT(std::string(tok.status().message()), HasSubstr("tokenizer.json"));  // the file
}

TEST(HfTokenizerTest, RefusesWhatItDoesNotImplement) {
  const nlohmann::json base = testing::ByteLevelTokenizerJson({{"a", "b"}});
  auto with = [&](const std::string& pointer, nlohmann::json value) {
    nlohmann::json j = base;
    j[nlohmann::json::json_pointer(pointer)] = std::move(value);
    return j;
  };
  ExpectRefused(with("/model/type", "Unigram"), "model.type = \"Unigram\"");
  ExpectRefused(with("/normalizer", {{"type", "NFKC"}}), "normalizer = {\"type\":\"NFKC\"}");
  ExpectRefused(with("/decoder", {{"type", "Metaspace"}}), "decoder.type = \"Metaspace\"");
  ExpectRefused(with("/decoder", nullptr), "decoder = null");
  ExpectRefused(with("/truncation", {{"max_length", 8}}), "truncation = ");
  ExpectRefused(with("/padding", {{"strategy", "BatchLongest"}}), "padding = ");
  ExpectRefused(with("/post_processor", {{"type", "RobertaProcessing"}}),
                "post_processor.type = \"RobertaProcessing\"");
  ExpectRefused(with("/version", "2.0"), "version = \"2.0\"");
  // A "type" that is not a string: nlohmann's value("type", "") threw type_error, which ended
  // the process (found by fuzz/tokenizer_json_fuzzer.cc).
  ExpectRefused(with("/post_processor", {{"type", {1, 2}}}), "post_processor.type = [1,2]");
  ExpectRefused(with("/pre_tokenizer", {{"type", 7}}), "pre_tokenizer");
  ExpectRefused(with("/decoder", {{"type", nullptr}}), "decoder");
  ExpectRefused(with("/extra", 1), "extra = 1");
  ExpectRefused(with("/added_tokens", {{{"id", 999}, {"content", "<x>"}, {"special", true}}}),
                "added_tokens[0].id = 999: Hugging Face tokenizers gives \"<x>\" the id 257");
  ExpectRefused(with("/added_tokens", {{{"id", 257}, {"content", "<x>"}, {"weird", true}}}),
                "added_tokens[0].weird");
}

// A refused value is quoted in the error, briefly: printing it used to dump() the whole value,
// which recursed once per level, so a tokenizer.json with a million nested arrays (or a Sequence
// of pre-tokenizers nested 100,000 deep) overflowed the stack (found with
// fuzz/tokenizer_json_fuzzer.cc's build on a crafted file).
TEST(HfTokenizerTest, ADeeplyNestedValueIsQuotedBriefly) {
  const std::string nested = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  std::string text = testing::ByteLevelTokenizerJson({}).dump();
  const std::string null_normalizer = R"("normalizer":null)";
  text.replace(text.find(null_normalizer), null_normalizer.size(),
               StrCat(R"("normalizer":)", nested));
  auto tok = ParseHfTokenizer(text, "deep/tokenizer.json");
  ASSERT_FALSE(tok.ok());
  EXPECT_THAT(std::string(tok.status().message()),
              HasSubstr(StrCat("normalizer = ", std::string(17, '['), "…", std::string(17, ']'),
                                ": only null")));
  EXPECT_THAT(std::string(tok.status().message()), HasSubstr("deep/tokenizer.json"));
}

TEST(HfTokenizerTest, MissingAndBrokenFiles) {
  auto missing = LoadHfTokenizer("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  const std::string path = (std::filesystem::path(::testing::TempDir()) / "broken.json").string();
  std::ofstream(path) << "{\"model\": ";
  auto broken = LoadHfTokenizer(path);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("not valid JSON"));
  // A number beyond a double's range is nlohmann's out_of_range, not parse_error; it escaped and
  // ended the process (found by fuzz/tokenizer_json_fuzzer.cc).
  auto huge = ParseHfTokenizer(R"({"version": "1.0", "model": {"dropout": 1e999}})", "t.json");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("t.json: not valid JSON"));
}

TEST(HfTokenizerTest, EncodeDecodeByteLevel) {
  auto tok = LoadJson(testing::ByteLevelTokenizerJson({{"h", "i"}, {" ", "t"}}));
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("hi to");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre(256, 257, 'o'));  // "hi", " t", "o"
  EXPECT_EQ(*(*tok)->Decode(*ids), "hi to");
  EXPECT_EQ((*tok)->vocab_size(), 258);
  EXPECT_EQ(*(*tok)->TokenText(257), "\xC4\xA0t");  // "Ġt"
  EXPECT_EQ(*(*tok)->TokenId("\xC4\xA0t"), 257);
  EXPECT_EQ((*tok)->TokenBytes(257), " t");
  EXPECT_FALSE((*tok)->TokenId("nope").has_value());
  EXPECT_THAT((*tok)->DebugString(), HasSubstr("2 merges"));
}

TEST(HfTokenizerTest, DecodeRefusesUnknownIds) {
  auto tok = LoadJson(testing::ByteLevelTokenizerJson({}));
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto text = (*tok)->Decode({'a', 256});
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("id 256 at position 1"));
  EXPECT_FALSE((*tok)->Decode({-1}).ok());
}

// Bytes that are not UTF-8: an error naming the offset, or U+FFFD when asked.
TEST(HfTokenizerTest, InvalidUtf8) {
  auto strict = LoadJson(testing::ByteLevelTokenizerJson({}));
  ASSERT_TRUE(strict.ok()) << strict.status();
  auto error = (*strict)->Encode("ok \xC3\xA9 \xFF!");
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(error.status().message()), HasSubstr("byte offset 6 (byte 0xFF)"));

  HfTokenizerOptions options;
  options.invalid_utf8 = HfTokenizerOptions::InvalidUtf8::kReplace;
  auto lenient = LoadJson(testing::ByteLevelTokenizerJson({}), options);
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  auto replaced = (*lenient)->Encode("ok \xC3\xA9 \xFF!\xE4\xBD");
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_EQ(*replaced, *(*lenient)->Encode("ok \xC3\xA9 \xEF\xBF\xBD!\xEF\xBF\xBD"));
}

TEST(HfTokenizerTest, TemplateSpecialTokensOnlyWhenAsked) {
  nlohmann::json json = testing::ByteLevelTokenizerJson({});
  json["added_tokens"] = {{{"id", 256}, {"content", "<s>"}, {"special", true}},
                          {{"id", 257}, {"content", "</s>"}, {"special", true}}};
  json["post_processor"] = nlohmann::json::parse(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "</s>", "type_id": 0}}],
       "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
       "special_tokens": {"<s>": {"id": "<s>", "ids": [256], "tokens": ["<s>"]},
                          "</s>": {"id": "</s>", "ids": [257], "tokens": ["</s>"]}}}]})");
  auto plain = LoadJson(json);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_THAT(*(*plain)->Encode("a"), ElementsAre('a'));
  EXPECT_THAT((*plain)->template_prefix(), ElementsAre(256));
  EXPECT_THAT((*plain)->template_suffix(), ElementsAre(257));
  HfTokenizerOptions options;
  options.add_special_tokens = true;
  auto with = LoadJson(json, options);
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_THAT(*(*with)->Encode("a"), ElementsAre(256, 'a', 257));
  EXPECT_THAT(*(*with)->Encode("<s>"), ElementsAre(256, 256, 257));  // and in the text
  EXPECT_EQ(*(*with)->Decode({256, 'a', 257}), "<s>a</s>");
}

TEST(HfTokenizerTest, SpecialTokensFromConfig) {
  nlohmann::json json = testing::ByteLevelTokenizerJson({});
  json["added_tokens"] = {{{"id", 256}, {"content", "<|im_end|>"}, {"special", true}}};
  HfTokenizerOptions options;
  options.tokenizer_config = testing::WriteJson(
      {{"bos_token", nullptr}, {"eos_token", {{"content", "<|im_end|>"}}}, {"other", 1}},
      "tokenizer_config.json");
  auto tok = LoadJson(json, options);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->special().bos, -1);
  EXPECT_EQ((*tok)->special().eos, 256);
  EXPECT_EQ((*tok)->special().end_of_turn, -1);  // for the integration to set
  EXPECT_TRUE((*tok)->SetSpecialTokens({.bos = -1, .eos = 256, .end_of_turn = 256}).ok());
  EXPECT_EQ((*tok)->special().end_of_turn, 256);
  EXPECT_FALSE((*tok)->SetSpecialTokens({.end_of_turn = 9999}).ok());

  options.tokenizer_config =
      testing::WriteJson({{"eos_token", "<|nope|>"}}, "tokenizer_config.json");
  auto bad = LoadJson(json, options);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("eos_token \"<|nope|>\""));
}

// --- the real Qwen3 and Llama-3 files (third_party/tokenizers, from scripts/setup) -----------

class RealTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string source = testing::SourceDir();
    installed_ = new absl::Status(CheckReferenceInstalled(source));
    if (!installed_->ok()) return;
    for (const char* name : {"qwen3", "llama3"}) {
      HfTokenizerOptions options;
      options.tokenizer_config = TokenizerConfigPath(source, name);
      auto tok = LoadHfTokenizer(TokenizerJsonPath(source, name), options);
      EXPECT_TRUE(tok.ok()) << tok.status();
      (std::string(name) == "qwen3" ? qwen_ : llama_) = tok.ok() ? tok->release() : nullptr;
    }
  }
  void SetUp() override {
    ASSERT_TRUE(installed_->ok()) << *installed_;
    ASSERT_NE(qwen_, nullptr);
    ASSERT_NE(llama_, nullptr);
  }
  static std::vector<int64_t> Ids(const HfTokenizer* tok, std::string_view text) {
    auto ids = tok->Encode(text);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int64_t>{};
  }
  static inline absl::Status* installed_ = nullptr;
  static inline HfTokenizer* qwen_ = nullptr;
  static inline HfTokenizer* llama_ = nullptr;
};

TEST_F(RealTokenizerTest, KnownIds) {  // as printed by HF tokenizers 0.22
  EXPECT_THAT(Ids(qwen_, "Hello world"), ElementsAre(9707, 1879));
  EXPECT_THAT(Ids(qwen_, "<|im_start|>user\nhi<|im_end|>"),
              ElementsAre(151644, 872, 198, 6023, 151645));
  EXPECT_THAT(Ids(qwen_, "a   \n\n  b  "), ElementsAre(64, 33933, 220, 293, 256));
  EXPECT_THAT(Ids(qwen_, "12345678"), ElementsAre(16, 17, 18, 19, 20, 21, 22, 23));
  EXPECT_THAT(Ids(llama_, "Hello world"), ElementsAre(9906, 1917));
  EXPECT_THAT(Ids(llama_, "12345678"), ElementsAre(4513, 10961, 2495));
  EXPECT_THAT(Ids(llama_, "a  b"), ElementsAre(64, 220, 293));
}

TEST_F(RealTokenizerTest, VocabularyAndSpecialTokens) {
  EXPECT_EQ(qwen_->vocab_size(), 151669);
  EXPECT_EQ(llama_->vocab_size(), 128256);
  EXPECT_EQ(qwen_->special().bos, -1);  // Qwen3 has no BOS
  EXPECT_EQ(qwen_->special().eos, *qwen_->TokenId("<|im_end|>"));
  EXPECT_EQ(llama_->special().bos, 128000);
  EXPECT_EQ(llama_->special().eos, 128001);
  EXPECT_EQ(*qwen_->TokenId("<|im_end|>"), 151645);
  EXPECT_EQ(*llama_->TokenId("<|eot_id|>"), 128009);
  EXPECT_EQ(*qwen_->TokenText(1879), "\xC4\xA0world");
  EXPECT_EQ(*qwen_->Decode({151644, 872, 198}), "<|im_start|>user\n");
  EXPECT_THAT(qwen_->DebugString(), HasSubstr("normalizer NFC"));
  EXPECT_THAT(llama_->DebugString(), HasSubstr("ignore_merges"));
}

TEST_F(RealTokenizerTest, ThreadsGetTheSameIds) {
  const std::string text =
      "Concurrent actors encode observations: 日本語のテキスト, émoji 🎉, code `x += 1;`\n";
  const std::vector<int64_t> want = Ids(qwen_, text);
  qwen_->mutable_cache().Clear();
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto ids = qwen_->Encode(text);
        if (!ids.ok() || *ids != want) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace flywheel
