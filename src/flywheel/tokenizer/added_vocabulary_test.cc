#include "flywheel/tokenizer/added_vocabulary.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The splits of `text` as "text" or "[id]".
std::vector<std::string> Splits(const AddedVocabulary& added, std::string_view text,
                                bool normalized_set = false) {
  std::vector<AddedVocabulary::Split> splits;
  added.FindMatches(text, normalized_set, &splits);
  std::vector<std::string> out;
  for (const auto& s : splits) {
    const std::string part(text.substr(s.begin, s.end - s.begin));
    out.push_back(s.id >= 0 ? StrCat("[", s.id, ":", part, "]") : part);
  }
  return out;
}

AddedVocabulary Make(std::vector<AddedToken> tokens, Normalizer normalizer = {}) {
  auto added = AddedVocabulary::Create(std::move(tokens), normalizer);
  EXPECT_TRUE(added.ok()) << added.status();
  return *std::move(added);
}

TEST(AddedVocabularyTest, LeftmostThenLongest) {
  const AddedVocabulary added = Make(
      {{.id = 1, .content = "<a>"}, {.id = 2, .content = "<a><b>"}, {.id = 3, .content = "b>"}});
  EXPECT_THAT(Splits(added, "x<a><b>y"), ElementsAre("x", "[2:<a><b>]", "y"));
  EXPECT_THAT(Splits(added, "x<a><c>y"), ElementsAre("x", "[1:<a>]", "<c>y"));
  EXPECT_THAT(Splits(added, "<ab>"), ElementsAre("<a", "[3:b>]"));
  EXPECT_THAT(Splits(added, "<a><a>"), ElementsAre("[1:<a>]", "[1:<a>]"));
  EXPECT_THAT(Splits(added, "none"), ElementsAre("none"));
  EXPECT_THAT(Splits(added, ""), ElementsAre());
}

TEST(AddedVocabularyTest, SingleWord) {
  const AddedVocabulary added = Make({{.id = 5, .content = "hi", .single_word = true}});
  EXPECT_THAT(Splits(added, "hi there"), ElementsAre("[5:hi]", " there"));
  EXPECT_THAT(Splits(added, "say hi, ok"), ElementsAre("say ", "[5:hi]", ", ok"));
  EXPECT_THAT(Splits(added, "this"), ElementsAre("this"));
  EXPECT_THAT(Splits(added, "hit"), ElementsAre("hit"));
  EXPECT_THAT(Splits(added, "\xC3\xA9hi"), ElementsAre("\xC3\xA9hi"));  // é is a word character
  EXPECT_THAT(Splits(added, "_hi"), ElementsAre("_hi"));                // so is _
}

TEST(AddedVocabularyTest, StripTakesWhiteSpace) {
  const AddedVocabulary added = Make({{.id = 7, .content = "<m>", .lstrip = true, .rstrip = true}});
  EXPECT_THAT(Splits(added, "a  <m>  b"), ElementsAre("a", "[7:  <m>  ]", "b"));
  EXPECT_THAT(Splits(added, "a\t\xE3\x80\x80<m>\nb"),  // Unicode white space too
              ElementsAre("a", "[7:\t\xE3\x80\x80<m>\n]", "b"));
  // the second match's lstrip cannot take what the first one's rstrip took
  EXPECT_THAT(Splits(added, "<m>   <m>"), ElementsAre("[7:<m>   ]", "[7:<m>]"));
}

TEST(AddedVocabularyTest, NormalizedTokensMatchNormalizedText) {
  const AddedVocabulary added =
      Make({{.id = 9, .content = "e\xCC\x81t\xC3\xA9", .normalized = true},
            {.id = 10, .content = "<raw>"}},
           Normalizer::Nfc());
  EXPECT_TRUE(added.HasTokens(true));
  EXPECT_TRUE(added.HasTokens(false));
  // matched by its NFC form ("été") in the normalized set only
  EXPECT_THAT(Splits(added, "un \xC3\xA9t\xC3\xA9", true),
              ElementsAre("un ", "[9:\xC3\xA9t\xC3\xA9]"));
  EXPECT_THAT(Splits(added, "un \xC3\xA9t\xC3\xA9<raw>", false),
              ElementsAre("un \xC3\xA9t\xC3\xA9", "[10:<raw>]"));
}

TEST(AddedVocabularyTest, RefusesEmptyAndRepeatedContent) {
  auto empty = AddedVocabulary::Create({{.id = 1, .content = ""}}, Normalizer());
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("added_tokens[0].content"));
  auto twice = AddedVocabulary::Create({{.id = 1, .content = "<x>"}, {.id = 2, .content = "<x>"}},
                                       Normalizer());
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(std::string(twice.status().message()), HasSubstr("added_tokens[1]"));
}

TEST(AddedVocabularyTest, FindByContent) {
  const AddedVocabulary added = Make({{.id = 3, .content = "<|im_end|>", .special = true}});
  ASSERT_NE(added.FindByContent("<|im_end|>"), nullptr);
  EXPECT_EQ(added.FindByContent("<|im_end|>")->id, 3);
  EXPECT_EQ(added.FindByContent("<|im_end"), nullptr);
}

}  // namespace
}  // namespace flywheel
