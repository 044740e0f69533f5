#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/model/byte_tokenizer.h"
#include "flywheel/model/turn_template.h"
#include "flywheel/model/word_tokenizer.h"

namespace flywheel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ByteTokenizerTest, RoundTripsAnyText) {
  ByteTokenizer tok;
  const std::string text = "héllo\n\t\x01 wörld";
  auto ids = tok.Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->size(), text.size());
  EXPECT_EQ(*tok.Decode(*ids), text);
  EXPECT_EQ(*tok.Decode({tok.special().bos, 'a', tok.special().end_of_turn}), "<|bos|>a<|eot|>");
  EXPECT_THAT(tok.Decode({259}).status().message(), HasSubstr("token 259 at index 0"));
}

TEST(WordTokenizerTest, EncodesDeclaredWords) {
  auto tok = WordTokenizer::Create({"up", "down", "left", "right"});
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->vocab_size(), 8);
  EXPECT_THAT(*(*tok)->Encode("  up left\nup "), ElementsAre(4, 6, 4));
  EXPECT_EQ(*(*tok)->Decode({0, 4, 7, 2}), "<|bos|> up right <|eot|>");
  EXPECT_THAT((*tok)->Encode("up jump").status().message(), HasSubstr("\"jump\" is not in"));
  auto lenient = WordTokenizer::Create({"up"}, /*allow_unknown=*/true);
  EXPECT_THAT(*(*lenient)->Encode("up jump"), ElementsAre(4, WordTokenizer::kUnknown));
}

TEST(WordTokenizerTest, BadVocabularyIsAClearError) {
  EXPECT_THAT(WordTokenizer::Create({"a", "b", "a"}).status().message(),
              HasSubstr("appears twice"));
  EXPECT_THAT(WordTokenizer::Create({"a b"}).status().message(), HasSubstr("whitespace"));
  EXPECT_FALSE(WordTokenizer::Create({}).ok());
  EXPECT_FALSE(WordTokenizer::Create({""}).ok());
}

TEST(TurnTemplateTest, MarksOnlyPolicyTokensTrainable) {
  auto tok = *WordTokenizer::Create({"go", "wall", "ok"});
  TurnTemplate turns(tok.get());
  ASSERT_TRUE(turns.AddEnvironmentTurn("wall").ok());
  ASSERT_TRUE(turns.AddPolicyTurn({4, 2}).ok());  // "go" <|eot|>
  ASSERT_TRUE(turns.AddEnvironmentTurn("ok").ok());
  EXPECT_FALSE(turns.episode_ended());
  ASSERT_TRUE(turns.AddPolicyTurn({4, 1}).ok());  // "go" <|eos|>
  EXPECT_THAT(turns.tokens(), ElementsAre(0, 5, 2, 4, 2, 6, 2, 4, 1));
  EXPECT_THAT(turns.trainable(),
              ElementsAre(false, false, false, true, true, false, false, true, true));
  EXPECT_TRUE(turns.episode_ended());
  EXPECT_THAT(turns.PolicyStopTokens(), ElementsAre(2, 1));
  EXPECT_EQ(turns.Render(),
            "[env]<|bos|> wall <|eot|>[policy]go <|eot|>[env]ok <|eot|>[policy]go <|eos|>");
  EXPECT_FALSE(turns.AddPolicyTurn({99}).ok());
  EXPECT_THAT(turns.AddEnvironmentTurn("fly").message(), HasSubstr("\"fly\""));
}

}  // namespace
}  // namespace flywheel
