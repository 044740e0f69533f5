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

  const MatchedContext matched = MatchContext(rendered, {earlier}, *t);
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
  EXPECT_EQ(MatchContext(first, {}, *t).match, ContextMatch::kFirst);
  const LlmCall earlier = Earlier(*t, Encode(*t, "Hello<|im_end|>"));
  std::vector<int64_t> extended(earlier.context.begin(), earlier.context.end());
  extended.insert(extended.end(), earlier.generated.begin(), earlier.generated.end());
  for (int64_t id : Encode(*t, "\n<|im_start|>user\nMore")) extended.push_back(id);
  MatchedContext same = MatchContext(extended, {earlier}, *t);
  EXPECT_EQ(same.match, ContextMatch::kTokens);
  EXPECT_EQ(same.tokens, extended);
  // The history says something else than the policy wrote: nothing to reuse.
  const std::vector<int64_t> other =
      Encode(*t, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nBye<|im_end|>\n");
  MatchedContext rerendered = MatchContext(other, {earlier}, *t);
  EXPECT_EQ(rerendered.match, ContextMatch::kRerendered);
  EXPECT_EQ(rerendered.tokens, other);
}

}  // namespace
}  // namespace flywheel::gateway
