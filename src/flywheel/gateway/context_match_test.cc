#include "flywheel/gateway/context_match.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "flywheel/tokenizer/hf_tokenizer.h"

namespace flywheel::gateway {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> Qwen3() {
  const char* source = std::getenv("FLYWHEEL_SOURCE_DIR");
  const fs::path dir = fs::path(source != nullptr ? source : ".") / "third_party/tokenizers/qwen3";
  HfTokenizerOptions options;
  options.tokenizer_config = (dir / "tokenizer_config.json").string();
  auto tokenizer = LoadHfTokenizer((dir / "tokenizer.json").string(), options);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status() << " (run scripts/setup)";
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

std::vector<int64_t> Encode(const Tokenizer& t, std::string_view text) { return *t.Encode(text); }

LlmCall Earlier(const Tokenizer& t, std::vector<int64_t> generated) {
  LlmCall call;
  const std::vector<int64_t> context =
      Encode(t, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  call.context.assign(context.begin(), context.end());
  call.generated.assign(generated.begin(), generated.end());
  return call;
}

TEST(ContextMatchTest, TheEarlierCallsOwnTokensReplaceTheirReRenderedText) {
  std::unique_ptr<Tokenizer> t = Qwen3();
  ASSERT_NE(t, nullptr);
  // The policy wrote "Hello" as "Hel" + "lo" (not the tokens Encode gives "Hello"), then stopped.
  std::vector<int64_t> generated = Encode(*t, "Hel");
  for (int64_t id : Encode(*t, "lo")) generated.push_back(id);
  generated.push_back(*t->Encode("<|im_end|>")->begin());
  ASSERT_NE(Encode(*t, "Hello<|im_end|>"), generated);
  const LlmCall earlier = Earlier(*t, generated);
  const std::string next_turn = "\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n";
  const std::vector<int64_t> rendered = Encode(
      *t, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>" + next_turn);

  const MatchedContext matched = MatchContext(rendered, "", {earlier}, *t);
  EXPECT_EQ(matched.match, ContextMatch::kText);
  std::vector<int64_t> expected(earlier.context.begin(), earlier.context.end());
  expected.insert(expected.end(), generated.begin(), generated.end());
  for (int64_t id : Encode(*t, next_turn)) expected.push_back(id);
  EXPECT_EQ(matched.tokens, expected);
  EXPECT_EQ(*t->Decode(matched.tokens), *t->Decode(rendered));  // the same text
}

TEST(ContextMatchTest, FirstCallsTokenPrefixesAndReRenderedHistoriesAreLeftAsRendered) {
  std::unique_ptr<Tokenizer> t = Qwen3();
  ASSERT_NE(t, nullptr);
  const std::vector<int64_t> first = Encode(*t, "<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(MatchContext(first, "", {}, *t).match, ContextMatch::kFirst);
  const LlmCall earlier = Earlier(*t, Encode(*t, "Hello<|im_end|>"));
  std::vector<int64_t> extended(earlier.context.begin(), earlier.context.end());
  extended.insert(extended.end(), earlier.generated.begin(), earlier.generated.end());
  for (int64_t id : Encode(*t, "\n<|im_start|>user\nMore")) extended.push_back(id);
  MatchedContext same = MatchContext(extended, "", {earlier}, *t);
  EXPECT_EQ(same.match, ContextMatch::kTokens);
  EXPECT_EQ(same.tokens, extended);
  // The history says something else than the policy wrote: nothing to reuse.
  const std::vector<int64_t> other =
      Encode(*t, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nBye<|im_end|>\n");
  MatchedContext rerendered = MatchContext(other, "", {earlier}, *t);
  EXPECT_EQ(rerendered.match, ContextMatch::kRerendered);
  EXPECT_EQ(rerendered.tokens, other);
}

// An older call whose tokens are the prompt's prefix must not win over the newest call, whose
// text continues it: the prompt continues the newest call's own tokens.
TEST(ContextMatchTest, TheNewestCallIsContinuedEvenWhereAnOlderOneMatchesAsTokens) {
  std::unique_ptr<Tokenizer> t = Qwen3();
  ASSERT_NE(t, nullptr);
  const LlmCall first = Earlier(*t, Encode(*t, "Hi<|im_end|>"));
  LlmCall second = first;  // its context: the first call's, its answer, a new user turn
  second.context.insert(second.context.end(), first.generated.begin(), first.generated.end());
  for (int64_t id :
       Encode(*t, "\n<|im_start|>user\nSay hello<|im_end|>\n<|im_start|>assistant\n")) {
    second.context.push_back(static_cast<int32_t>(id));
  }
  second.generated.clear();
  for (int64_t id : Encode(*t, "Hel")) second.generated.push_back(static_cast<int32_t>(id));
  for (int64_t id : Encode(*t, "lo")) second.generated.push_back(static_cast<int32_t>(id));
  const std::string first_text =
      *t->Decode(std::vector<int64_t>(second.context.begin(), second.context.end()));
  const std::string text = first_text + "Hello\n<|im_start|>user\nAgain";
  const std::vector<int64_t> encoded = Encode(*t, text);
  std::vector<int64_t> first_sequence(first.context.begin(), first.context.end());
  first_sequence.insert(first_sequence.end(), first.generated.begin(), first.generated.end());
  ASSERT_TRUE(std::equal(first_sequence.begin(), first_sequence.end(), encoded.begin()))
      << "the first call must be a token prefix, or this test checks nothing";
  const MatchedContext matched = MatchContext(encoded, text, {first, second}, *t);
  EXPECT_EQ(matched.match, ContextMatch::kText);
  std::vector<int64_t> expected(second.context.begin(), second.context.end());
  expected.insert(expected.end(), second.generated.begin(), second.generated.end());
  ASSERT_GE(matched.tokens.size(), expected.size());
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), matched.tokens.begin()));
}

// The tokenizer normalises to NFC, so a decomposed character the policy generated does not decode
// back from the encoded prompt; the rendered text still starts with it.
TEST(ContextMatchTest, TextIsMatchedAsRenderedBeforeTheTokenizerNormalisesIt) {
  std::unique_ptr<Tokenizer> t = Qwen3();
  ASSERT_NE(t, nullptr);
  const std::string decomposed = "Cafe\u0301";  // e + combining acute accent
  const LlmCall earlier = Earlier(*t, Encode(*t, "Cafe"));
  LlmCall with_accent = earlier;
  with_accent.generated.clear();
  for (int64_t id : Encode(*t, "Cafe")) with_accent.generated.push_back(static_cast<int32_t>(id));
  // The accent as its own tokens, as a policy may sample it.
  for (int64_t id : Encode(*t, "\u0301")) with_accent.generated.push_back(static_cast<int32_t>(id));
  const std::string text =
      *t->Decode(std::vector<int64_t>(with_accent.context.begin(), with_accent.context.end())) +
      decomposed + "<|im_end|>\n<|im_start|>user\nMore";
  const std::vector<int64_t> encoded = Encode(*t, text);
  ASSERT_EQ(MatchContext(encoded, "", {with_accent}, *t).match, ContextMatch::kRerendered)
      << "the tokenizer no longer normalises: this test checks nothing";
  const MatchedContext matched = MatchContext(encoded, text, {with_accent}, *t);
  EXPECT_EQ(matched.match, ContextMatch::kText);
}

}  // namespace
}  // namespace flywheel::gateway
