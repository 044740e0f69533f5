#include "flywheel/tokenizer/byte_level.h"

#include <gtest/gtest.h>

#include <set>

namespace flywheel {
namespace {

TEST(ByteLevelTest, Gpt2Alphabet) {
  EXPECT_EQ(ByteLevelChar(' '), U'\u0120');   // Ġ
  EXPECT_EQ(ByteLevelChar('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(ByteLevelChar(0x00), U'\u0100');
  EXPECT_EQ(ByteLevelChar(0x7F), U'\u0121');
  EXPECT_EQ(ByteLevelChar(0xAD), U'\u0143');  // the soft hyphen is not printable
  EXPECT_EQ(ByteLevelChar('A'), U'A');
  EXPECT_EQ(ByteLevelChar(0xE9), U'\u00E9');
}

TEST(ByteLevelTest, IsABijection) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = ByteLevelChar(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(c).second) << b;
    ASSERT_TRUE(ByteLevelByte(c).has_value()) << b;
    EXPECT_EQ(*ByteLevelByte(c), b);
  }
  EXPECT_FALSE(ByteLevelByte(U' ').has_value());
  EXPECT_FALSE(ByteLevelByte(U'\u4E2D').has_value());
}

TEST(ByteLevelTest, EncodeAndDecodeTokens) {
  EXPECT_EQ(ByteLevelEncode(" world"), "\xC4\xA0world");  // "Ġworld"
  EXPECT_EQ(ByteLevelDecode("\xC4\xA0world"), " world");
  EXPECT_EQ(ByteLevelDecode("<|im_end|>"), "<|im_end|>");
  const std::string all = [] {
    std::string s;
    for (int b = 0; b < 256; ++b) s.push_back(static_cast<char>(b));
    return s;
  }();
  EXPECT_EQ(ByteLevelDecode(ByteLevelEncode(all)), all);
  EXPECT_FALSE(ByteLevelDecode("a b").has_value());  // U+0020 is not in the alphabet
}

// HF's ByteLevel decoder: a token with a character outside the alphabet is emitted as its own
// UTF-8; otherwise each character is a byte, even in an added token ("é" is byte 0xE9).
TEST(ByteLevelTest, TokenBytesAsHfDecodes) {
  EXPECT_EQ(ByteLevelTokenBytes("a b"), "a b");
  EXPECT_EQ(ByteLevelTokenBytes("\xE4\xB8\xAD"), "\xE4\xB8\xAD");  // 中: not in the alphabet
  EXPECT_EQ(ByteLevelTokenBytes("caf\xC3\xA9"), "caf\xE9");
}

}  // namespace
}  // namespace flywheel
