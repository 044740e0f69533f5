#include "flywheel/tokenizer/split_regex.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/tokenizer/pre_tokenizer.h"
#include "flywheel/tokenizer/unicode_properties.h"

namespace flywheel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr std::string_view kQwen =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> Split(std::string_view pattern, std::string_view text) {
  auto regex = SplitRegex::Compile(pattern);
  EXPECT_TRUE(regex.ok()) << regex.status();
  std::vector<std::string> pieces;
  if (regex.ok()) regex->Split(text, [&](std::string_view p) { pieces.emplace_back(p); });
  return pieces;
}

TEST(SplitRegexTest, WordsAndContractions) {
  EXPECT_THAT(Split(kQwen, "Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(Split(kQwen, "don't"), ElementsAre("don", "'t"));
  EXPECT_THAT(Split(kQwen, "I'M HE'LL"), ElementsAre("I", "'M", " HE", "'LL"));
  EXPECT_THAT(Split(kQwen, "x.y, z"), ElementsAre("x", ".y", ",", " z"));
  EXPECT_THAT(Split(kQwen, "a ...\n\nb"), ElementsAre("a", " ...\n\n", "b"));
}

TEST(SplitRegexTest, Numbers) {
  EXPECT_THAT(Split(kQwen, "12345"), ElementsAre("1", "2", "3", "4", "5"));
  EXPECT_THAT(Split(kLlama3, "12345"), ElementsAre("123", "45"));
  EXPECT_THAT(Split(kLlama3, "x\xD9\xA3\xD9\xA4"), ElementsAre("x", "\xD9\xA3\xD9\xA4"));
}

// \s+(?!\S): a white-space run before a non-space leaves its last character to the next piece.
TEST(SplitRegexTest, WhitespaceLookahead) {
  EXPECT_THAT(Split(kQwen, "a  b"), ElementsAre("a", " ", " b"));
  EXPECT_THAT(Split(kQwen, "a   \n\n  b  "), ElementsAre("a", "   \n\n", " ", " b", "  "));
  EXPECT_THAT(Split(kQwen, "x\t\ty"), ElementsAre("x", "\t", "\ty"));
  EXPECT_THAT(Split(kQwen, "a \t b"), ElementsAre("a", " \t", " b"));
  EXPECT_THAT(Split(kQwen, "a \n"), ElementsAre("a", " \n"));
  EXPECT_THAT(Split(kQwen, "  "), ElementsAre("  "));
  EXPECT_THAT(Split(kQwen, "a  "), ElementsAre("a", "  "));
  EXPECT_THAT(Split(kQwen, "  a"), ElementsAre(" ", " a"));
  EXPECT_THAT(Split(kQwen, "a    1"), ElementsAre("a", "   ", " ", "1"));
  // Unicode white space counts, and is given back whole (U+3000 is three bytes)
  EXPECT_THAT(Split(kQwen,
                    "a\xE3\x80\x80\xE3\x80\x80"
                    "b"),
              ElementsAre("a", "\xE3\x80\x80",
                          "\xE3\x80\x80"
                          "b"));
  EXPECT_THAT(Split(kQwen, "a\xC2\xA0\xC2\xA0"), ElementsAre("a", "\xC2\xA0\xC2\xA0"));
  EXPECT_THAT(Split(kQwen, "a\v\f.b"), ElementsAre("a", "\v", "\f", ".b"));
}

TEST(SplitRegexTest, LookaheadAloneAndGaps) {
  // only \s+(?!\S)|\s+: the text between matches becomes pieces too (Isolated)
  EXPECT_THAT(Split(R"(\s+(?!\S)|\s+)", "a  b"), ElementsAre("a", " ", " ", "b"));
  EXPECT_THAT(Split(R"(\s+(?!\S)|\s+)", "ab   "), ElementsAre("ab", "   "));
  EXPECT_THAT(Split("b", "abcbd"), ElementsAre("a", "b", "c", "b", "d"));
}

TEST(SplitRegexTest, Gpt2Pattern) {
  EXPECT_THAT(Split(kGpt2Pattern, "Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(Split(kGpt2Pattern, "  hi 42!"), ElementsAre(" ", " hi", " 42", "!"));
}

TEST(SplitRegexTest, LiteralPattern) {
  auto regex = SplitRegex::Compile(".", /*literal=*/true);
  ASSERT_TRUE(regex.ok()) << regex.status();
  std::vector<std::string> pieces;
  regex->Split("a.b", [&](std::string_view p) { pieces.emplace_back(p); });
  EXPECT_THAT(pieces, ElementsAre("a", ".", "b"));
}

TEST(SplitRegexTest, OnigurumaSpaceIsUnicodeWhiteSpace) {
  for (char32_t c = 0; c <= 0x10FFFF; ++c) {
    ASSERT_EQ(IsOnigurumaSpace(c), IsWhiteSpace(c)) << std::hex << static_cast<uint32_t>(c);
  }
}

TEST(SplitRegexTest, Translation) {
  auto re = OnigurumaToRe2(R"([^\s\p{L}]\S\u00e9(?i:'s))");
  ASSERT_TRUE(re.ok()) << re.status();
  EXPECT_THAT(*re, HasSubstr(R"([^\t\n\x0B\f\r\x20)"));
  EXPECT_THAT(*re, HasSubstr(R"(\x{3000}\p{L}])"));
  EXPECT_THAT(*re, HasSubstr(R"(\x{00e9}(?i:'s))"));
}

TEST(SplitRegexTest, RefusesWhatRe2WouldMisread) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"(\d+)", "\\d"},
      {R"(\w+)", "\\w"},
      {R"(\bx)", "\\b"},
      {R"(a(?=b))", "lookaround"},
      {R"((?<!a)b)", "lookaround"},
      {R"(\s+(?!\S)|a)", "lookaround"},
      {"^a", "line anchors"},
      {"a$", "line anchors"},
      {"(?m:a.b)", "inline flag"},
      {"(?>ab)", "atomic"},
      {"a{,3}", "{,n}"},
      {"[[:alpha:]]", "POSIX"},
      {R"((a)\1)", "backreferences"},
      {"a*", "empty string"},
      {"(a", "missing )"},
  };
  for (const auto& [pattern, why] : cases) {
    auto regex = SplitRegex::Compile(pattern);
    ASSERT_FALSE(regex.ok()) << pattern;
    EXPECT_THAT(std::string(regex.status().message()), HasSubstr(why)) << pattern;
  }
}

}  // namespace
}  // namespace flywheel
