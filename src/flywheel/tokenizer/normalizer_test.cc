#include "flywheel/tokenizer/normalizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace flywheel {
namespace {

using ::testing::HasSubstr;

TEST(NormalizerTest, NullIsIdentity) {
  auto n = Normalizer::FromJson(nullptr);
  ASSERT_TRUE(n.ok()) << n.status();
  std::string scratch;
  const std::string_view text = "e\xCC\x81";
  EXPECT_EQ(n->Normalize(text, &scratch).data(), text.data());
}

TEST(NormalizerTest, Nfc) {
  auto n = Normalizer::FromJson(nlohmann::json::parse(R"({"type": "NFC"})"));
  ASSERT_TRUE(n.ok()) << n.status();
  std::string scratch;
  EXPECT_EQ(n->Normalize("caf"
                         "e\xCC\x81",
                         &scratch),
            "caf\xC3\xA9");
  EXPECT_EQ(n->Normalize("\xE1\x84\x80\xE1\x85\xA1", &scratch), "\xEA\xB0\x80");  // jamo: 가
  EXPECT_EQ(n->Normalize("\xEF\xA4\x80", &scratch), "\xE8\xB1\x88");  // U+F900 -> U+8C48
  EXPECT_EQ(n->Normalize("\xE2\x84\xA6", &scratch), "\xCE\xA9");      // Ohm -> Omega
  // unchanged text is returned as is, without a copy
  for (std::string_view same : {"ascii only", "caf\xC3\xA9", "\xE4\xB8\xAD\xE6\x96\x87"}) {
    EXPECT_EQ(n->Normalize(same, &scratch).data(), same.data()) << same;
  }
}

TEST(NormalizerTest, OthersAreRefused) {
  for (const char* json : {R"({"type": "NFKC"})", R"({"type": "Lowercase"})",
                           R"({"type": "Sequence", "normalizers": [{"type": "NFC"}]})"}) {
    auto n = Normalizer::FromJson(nlohmann::json::parse(json));
    ASSERT_FALSE(n.ok()) << json;
    EXPECT_EQ(n.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(std::string(n.status().message()), HasSubstr("normalizer = "));
  }
}

}  // namespace
}  // namespace flywheel
