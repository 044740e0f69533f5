// The ids of HfTokenizer against Hugging Face's `tokenizers` library itself (its Node binding,
// fetched by scripts/setup) for Qwen3 and Llama-3 on the 12,000 strings of TokenizerCorpus:
// every id equal, Decode equal to the library's decode, decode(encode(x)) == x (NFC(x) for
// Qwen, whose normalizer is NFC), and the streaming decoder's pieces joining to Decode.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "flywheel/core/strings.h"
#include "flywheel/tokenizer/hf_tokenizer.h"
#include "flywheel/tokenizer/reference_tokenizer.h"
#include "flywheel/tokenizer/streaming_decoder.h"
#include "flywheel/tokenizer/test_tokenizer_json.h"
#include "flywheel/tokenizer/tokenizer_corpus.h"

namespace flywheel {
namespace {

constexpr size_t kCorpusSize = 12000;

// The string as a C++ literal would write it, for failure messages.
std::string Escaped(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02X}", c);
    }
  }
  return out + "\"";
}

// Id sequences whose bytes are not valid UTF-8 on their own: single bytes of multi-byte
// characters, cut emoji, lone continuation bytes. `tok` supplies the single-byte tokens.
std::vector<std::vector<int64_t>> InvalidByteSequences(const HfTokenizer& tok) {
  auto byte = [&](unsigned char b) {
    for (int64_t id = 0; id < tok.vocab_size(); ++id) {
      if (tok.TokenBytes(id) == std::string(1, static_cast<char>(b))) return id;
    }
    ADD_FAILURE() << "no token for byte " << int{b};
    return int64_t{0};
  };
  const int64_t a = byte('a');
  return {{byte(0xE4)},
          {byte(0xE4), byte(0xBD)},
          {byte(0xE4), byte(0xBD), a},
          {a, byte(0xFF), a},
          {byte(0xF0), byte(0x9F), byte(0x98)},
          {byte(0x80), byte(0xBF)},
          {byte(0xED), byte(0xA0), byte(0x80)},
          {byte(0xC0), byte(0x80), a},
          {byte(0xF4), byte(0x90), byte(0x80), byte(0x80)},
          {a, byte(0xE4), byte(0xBD), byte(0xA0), a}};
}

class ReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceTest, SameIdsAsHuggingFaceTokenizers) {
  const std::string name = GetParam();
  const std::string source = testing::SourceDir();
  const absl::Status installed = CheckReferenceInstalled(source);
  ASSERT_TRUE(installed.ok()) << installed;

  const auto start = std::chrono::steady_clock::now();
  HfTokenizerOptions options;
  options.tokenizer_config = TokenizerConfigPath(source, name);
  auto loaded = LoadHfTokenizer(TokenizerJsonPath(source, name), options);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const HfTokenizer& tok = **loaded;

  const std::vector<CorpusText> corpus = TokenizerCorpus(kCorpusSize);
  nlohmann::json texts = nlohmann::json::array();
  for (const CorpusText& t : corpus) texts.push_back(t.text);
  const std::vector<std::vector<int64_t>> invalid = InvalidByteSequences(tok);
  const nlohmann::json request = {
      {"mode", "encode"},
      {"tokenizers", {{{"name", name}, {"path", TokenizerJsonPath(source, name)}}}},
      {"texts", texts},
      {"decode_ids", {{name, invalid}}}};
  const std::string work = (std::filesystem::path(::testing::TempDir()) / name).string();
  std::filesystem::create_directories(work);
  auto response = RunReferenceTokenizer(source, request, work);
  ASSERT_TRUE(response.ok()) << response.status();
  const nlohmann::json& ref = (*response)[name];
  ASSERT_EQ(ref["ids"].size(), corpus.size());

  size_t id_mismatches = 0, decode_mismatches = 0, round_trip_failures = 0, stream_failures = 0;
  size_t tokens = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string& text = corpus[i].text;
    auto ids = tok.Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    tokens += ids->size();
    const std::vector<int64_t> want = ref["ids"][i].get<std::vector<int64_t>>();
    if (*ids != want && ++id_mismatches <= 5) {
      ADD_FAILURE() << name << " [" << corpus[i].category << " #" << i << "] " << Escaped(text)
                    << "\n  flywheel:  " << ::testing::PrintToString(*ids)
                    << "\n  reference: " << ::testing::PrintToString(want);
    }
    auto decoded = tok.Decode(*ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    const std::string ref_decoded = ref["decoded"][i].get<std::string>();
    if (*decoded != ref_decoded && ++decode_mismatches <= 5) {
      ADD_FAILURE() << name << " decode #" << i << ": " << Escaped(*decoded) << " vs reference "
                    << Escaped(ref_decoded);
    }
    // The round trip gives back the text, normalized where the tokenizer normalizes.
    std::string scratch;
    const std::string normalized =
        name == "qwen3" ? std::string(Normalizer::Nfc().Normalize(text, &scratch)) : text;
    if (*decoded != normalized && ++round_trip_failures <= 5) {
      ADD_FAILURE() << name << " decode(encode(x)) != x for #" << i << " " << Escaped(text)
                    << " -> " << Escaped(*decoded);
    }
    StreamingDecoder stream(&tok);
    std::string joined;
    for (int64_t id : *ids) joined += *stream.Next(id);
    joined += stream.Flush();
    if (joined != *decoded && ++stream_failures <= 5) {
      ADD_FAILURE() << name << " streaming decode of #" << i << " gives " << Escaped(joined);
    }
  }
  EXPECT_EQ(id_mismatches, 0u) << "of " << corpus.size() << " strings";
  EXPECT_EQ(decode_mismatches, 0u);
  EXPECT_EQ(round_trip_failures, 0u);
  EXPECT_EQ(stream_failures, 0u);

  // Invalid UTF-8 from token bytes: U+FFFD exactly where the library puts it.
  ASSERT_EQ(ref["decoded_ids"].size(), invalid.size());
  for (size_t i = 0; i < invalid.size(); ++i) {
    auto decoded = tok.Decode(invalid[i]);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, ref["decoded_ids"][i].get<std::string>())
        << name << " " << ::testing::PrintToString(invalid[i]);
    StreamingDecoder stream(&tok);
    std::string joined;
    for (int64_t id : invalid[i]) joined += *stream.Next(id);
    joined += stream.Flush();
    EXPECT_EQ(joined, *decoded);
  }
  std::cout << name << ": " << corpus.size() << " strings, " << CorpusBytes(corpus) << " bytes, "
            << tokens << " tokens compared in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
            << " s\n";
}

INSTANTIATE_TEST_SUITE_P(Models, ReferenceTest, ::testing::Values("qwen3", "llama3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace flywheel
