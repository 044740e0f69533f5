#include "flywheel/tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace flywheel {
namespace {

constexpr std::string_view kFffd = "\xEF\xBF\xBD";

TEST(Utf8Test, ValidTextHasNoInvalidByte) {
  for (std::string_view text : std::initializer_list<std::string_view>{
           "", "plain ascii", "caf\xC3\xA9", "\xE4\xB8\xAD\xE6\x96\x87", "\xF0\x9F\x98\x80",
           "\xF4\x8F\xBF\xBF", std::string_view("nul\0inside", 10)}) {
    EXPECT_FALSE(FirstInvalidUtf8(text).has_value()) << text;
  }
}

TEST(Utf8Test, FirstInvalidByteOffset) {
  EXPECT_EQ(FirstInvalidUtf8("a\xFF"), 1u);
  EXPECT_EQ(FirstInvalidUtf8("ab\xC0\x80"), 2u);        // overlong
  EXPECT_EQ(FirstInvalidUtf8("\xE0\x80\x80"), 0u);      // overlong three bytes
  EXPECT_EQ(FirstInvalidUtf8("x\xED\xA0\x80"), 1u);     // a surrogate
  EXPECT_EQ(FirstInvalidUtf8("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("ok\x80"), 2u);            // continuation without lead
  EXPECT_EQ(FirstInvalidUtf8("\xC3\xA9\xE4\xB8"), 2u);  // cut at the end
}

// Unicode 15, section 3.9, Table 3-8: U+FFFD for each maximal subpart.
TEST(Utf8Test, LossyReplacesEachMaximalSubpart) {
  const std::string got = Utf8Lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64");
  const std::string want = "a" + std::string(kFffd) + std::string(kFffd) + std::string(kFffd) +
                           "b" + std::string(kFffd) + "c" + std::string(kFffd) +
                           std::string(kFffd) + "d";
  EXPECT_EQ(got, want);
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), std::string(kFffd) + std::string(kFffd) +
                                           std::string(kFffd));  // ED then A0 is no subpart
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x98"), std::string(kFffd));      // truncated: one subpart
  EXPECT_EQ(Utf8Lossy("valid \xC3\xA9"), "valid \xC3\xA9");
}

TEST(Utf8Test, NotFinalHoldsAnIncompleteTail) {
  std::string out;
  EXPECT_EQ(AppendUtf8Lossy("a\xE4\xBD", /*final=*/false, &out), 1u);
  EXPECT_EQ(out, "a");
  out.clear();
  // an invalid byte is replaced at once, the incomplete tail after it held
  EXPECT_EQ(AppendUtf8Lossy("\xFF"
                            "b\xF0\x9F",
                            /*final=*/false, &out),
            2u);
  EXPECT_EQ(out, std::string(kFffd) + "b");
  out.clear();
  EXPECT_EQ(AppendUtf8Lossy("a\xE4\xBD", /*final=*/true, &out), 3u);
  EXPECT_EQ(out, "a" + std::string(kFffd));
}

TEST(Utf8Test, EncodeDecodeCodePoints) {
  for (char32_t c : {U'\0', U'A', U'\u00E9', U'\u4E2D', U'\U0001F600', U'\U0010FFFF'}) {
    std::string s;
    AppendUtf8(c, &s);
    EXPECT_FALSE(FirstInvalidUtf8(s).has_value());
    char32_t back;
    EXPECT_EQ(DecodeUtf8(s, 0, &back), s.size());
    EXPECT_EQ(back, c);
    EXPECT_EQ(LastCharStart("ab" + s), 2u);
  }
}

TEST(Utf8Test, IsAscii) {
  EXPECT_TRUE(IsAscii(""));
  EXPECT_TRUE(IsAscii("0123456789abcdefghij"));
  EXPECT_FALSE(IsAscii("0123456789abcdefghi\xC3\xA9"));
  EXPECT_FALSE(IsAscii("\x80"));
}

}  // namespace
}  // namespace flywheel
