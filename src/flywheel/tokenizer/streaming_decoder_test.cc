#include "flywheel/tokenizer/streaming_decoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "flywheel/tokenizer/test_tokenizer_json.h"

namespace flywheel {
namespace {

using ::testing::ElementsAre;

constexpr std::string_view kFffd = "\xEF\xBF\xBD";

// Byte tokens (id = byte) and two merged ones: "\xC3\xA9" (é, id 256) and "a\xF0" (257, which
// ends inside a character).
std::unique_ptr<HfTokenizer> ByteTokenizer() {
  auto tok = LoadHfTokenizer(testing::WriteJson(
      testing::ByteLevelTokenizerJson({{"\xC3", "\xA9"}, {"a", "\xF0"}}), "bytes.json"));
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

std::vector<std::string> Stream(StreamingDecoder& decoder, const std::vector<int64_t>& ids) {
  std::vector<std::string> out;
  for (int64_t id : ids) {
    auto text = decoder.Next(id);
    EXPECT_TRUE(text.ok()) << text.status();
    out.push_back(text.ok() ? *text : "<error>");
  }
  return out;
}

TEST(StreamingDecoderTest, HoldsSplitCharacters) {
  const auto tok = ByteTokenizer();
  ASSERT_NE(tok, nullptr);
  StreamingDecoder decoder(tok.get());
  // 😀 is F0 9F 98 80: nothing until its last byte
  EXPECT_THAT(Stream(decoder, {'h', 0xF0, 0x9F, 0x98, 0x80, 256}),
              ElementsAre("h", "", "", "", "\xF0\x9F\x98\x80", "\xC3\xA9"));
  EXPECT_EQ(decoder.pending_bytes(), 0u);
  // a token that ends inside a character gives its complete part at once
  EXPECT_THAT(Stream(decoder, {257, 0x9F, 0x98, 0x80}),
              ElementsAre("a", "", "", "\xF0\x9F\x98\x80"));
  EXPECT_EQ(decoder.Flush(), "");
}

TEST(StreamingDecoderTest, InvalidBytesBecomeReplacementCharacters) {
  const auto tok = ByteTokenizer();
  ASSERT_NE(tok, nullptr);
  StreamingDecoder decoder(tok.get());
  EXPECT_THAT(Stream(decoder, {0xFF, 'x'}), ElementsAre(kFffd, "x"));  // at once
  // E4 BD is the start of a character until 'A' shows it is not: one U+FFFD for both bytes
  EXPECT_THAT(Stream(decoder, {0xE4, 0xBD, 'A'}), ElementsAre("", "", std::string(kFffd) + "A"));
  EXPECT_THAT(Stream(decoder, {0xE4}), ElementsAre(""));
  EXPECT_EQ(decoder.pending_bytes(), 1u);
  EXPECT_EQ(decoder.Flush(), kFffd);  // the end of the stream cuts the character
  EXPECT_EQ(decoder.pending_bytes(), 0u);
  EXPECT_FALSE(decoder.Next(99999).ok());
}

// Whatever the ids, the pieces join to Decode's text.
TEST(StreamingDecoderTest, JoinsToDecode) {
  const auto tok = ByteTokenizer();
  ASSERT_NE(tok, nullptr);
  std::mt19937_64 rng(3);
  // bytes weighted towards UTF-8 lead and continuation bytes, plus the merged tokens
  const std::vector<int64_t> alphabet = {'a',  ' ',  0x80, 0x9F, 0xA9, 0xBF, 0xC3, 0xE4,
                                         0xED, 0xF0, 0xF4, 0xFF, 0xC0, 256,  257};
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<int64_t> ids(rng() % 12);
    for (int64_t& id : ids) id = alphabet[rng() % alphabet.size()];
    StreamingDecoder decoder(tok.get());
    std::string joined;
    for (int64_t id : ids) joined += *decoder.Next(id);
    joined += decoder.Flush();
    ASSERT_EQ(joined, *tok->Decode(ids)) << ::testing::PrintToString(ids);
  }
}

}  // namespace
}  // namespace flywheel
