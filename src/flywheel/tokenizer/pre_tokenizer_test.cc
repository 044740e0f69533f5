#include "flywheel/tokenizer/pre_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace flywheel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Pieces(const char* json, std::string_view text) {
  auto pre = PreTokenizer::FromJson(nlohmann::json::parse(json));
  EXPECT_TRUE(pre.ok()) << pre.status();
  std::vector<std::string> pieces;
  if (pre.ok()) pre->Split(text, [&](std::string_view p) { pieces.emplace_back(p); });
  return pieces;
}

constexpr char kQwenLike[] = R"({"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\p{N}| ?\\p{L}+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]})";

TEST(PreTokenizerTest, SplitThenByteLevel) {
  EXPECT_THAT(Pieces(kQwenLike, "Hello world 42"), ElementsAre("Hello", " world", " ", "4", "2"));
  EXPECT_THAT(Pieces(kQwenLike, ""), ElementsAre());
}

TEST(PreTokenizerTest, ByteLevelAlone) {
  // HF's defaults: GPT-2's regex, and a space before a piece that has none
  EXPECT_THAT(Pieces(R"({"type": "ByteLevel"})", "Hello world"), ElementsAre(" Hello", " world"));
  EXPECT_THAT(Pieces(R"({"type": "ByteLevel", "add_prefix_space": false})", "Hello world"),
              ElementsAre("Hello", " world"));
  EXPECT_THAT(Pieces(R"({"type": "ByteLevel", "add_prefix_space": true})", " Hello"),
              ElementsAre(" Hello"));
  EXPECT_THAT(Pieces(R"({"type": "ByteLevel", "use_regex": false, "add_prefix_space": false})",
                     "Hello world"),
              ElementsAre("Hello world"));
}

void ExpectRefused(const char* json, std::string_view path) {
  auto pre = PreTokenizer::FromJson(nlohmann::json::parse(json));
  ASSERT_FALSE(pre.ok()) << json;
  EXPECT_THAT(std::string(pre.status().message()), HasSubstr(std::string(path))) << json;
}

TEST(PreTokenizerTest, RefusesWhatItDoesNotImplement) {
  ExpectRefused("null", "pre_tokenizer");
  ExpectRefused(R"({"type": "Metaspace", "replacement": "_"})",
                "pre_tokenizer.type = \"Metaspace\"");
  ExpectRefused(R"({"type": "Sequence", "pretokenizers": [{"type": "Digits"},
                  {"type": "ByteLevel"}]})",
                "pre_tokenizer.pretokenizers[0].type");
  ExpectRefused(R"({"type": "Sequence", "pretokenizers": [
                  {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Removed",
                   "invert": false}, {"type": "ByteLevel"}]})",
                "pre_tokenizer.pretokenizers[0].behavior");
  ExpectRefused(R"({"type": "Sequence", "pretokenizers": [
                  {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Isolated",
                   "invert": true}, {"type": "ByteLevel"}]})",
                "pre_tokenizer.pretokenizers[0].invert");
  ExpectRefused(R"({"type": "Sequence", "pretokenizers": [
                  {"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "Isolated",
                   "invert": false}, {"type": "ByteLevel"}]})",
                "pre_tokenizer.pretokenizers[0].pattern.Regex");
  ExpectRefused(R"({"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"},
                  {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Isolated",
                   "invert": false}]})",
                "ByteLevel must be the last");
  ExpectRefused(R"({"type": "Sequence", "pretokenizers": [
                  {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Isolated",
                   "invert": false}]})",
                "needs a ByteLevel");
  ExpectRefused(R"({"type": "ByteLevel", "prepend_scheme": "first"})",
                "pre_tokenizer.prepend_scheme");
}

}  // namespace
}  // namespace flywheel
