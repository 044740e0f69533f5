// Tiny byte-level BPE tokenizer.json documents for tests: the 256 byte tokens (ids 0..255, in
// byte order) plus merges over them, and helpers around them.
#ifndef FLYWHEEL_TOKENIZER_TEST_TOKENIZER_JSON_H_
#define FLYWHEEL_TOKENIZER_TEST_TOKENIZER_JSON_H_

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "flywheel/tokenizer/byte_level.h"

namespace flywheel::testing {

// "model" of a byte-level BPE: byte b has id b, each merge's result the next id.
inline nlohmann::json ByteLevelModel(
    const std::vector<std::pair<std::string, std::string>>& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    vocab[ByteLevelEncode(std::string(1, static_cast<char>(b)))] = b;
  }
  nlohmann::json merge_list = nlohmann::json::array();
  int next = 256;
  for (const auto& [left, right] : merges) {
    const std::string merged = ByteLevelEncode(left + right);
    if (!vocab.contains(merged)) vocab[merged] = next++;
    merge_list.push_back({ByteLevelEncode(left), ByteLevelEncode(right)});
  }
  return {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"ignore_merges", false},
          {"vocab", vocab},
          {"merges", merge_list}};
}

// A whole tokenizer.json: GPT-2's ByteLevel pre-tokenizer without a prefix space, ByteLevel
// decoder, no normalizer, no added tokens.
inline nlohmann::json ByteLevelTokenizerJson(
    const std::vector<std::pair<std::string, std::string>>& merges) {
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", nlohmann::json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "ByteLevel"},
            {"add_prefix_space", false},
            {"trim_offsets", true},
            {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder",
           {{"type", "ByteLevel"},
            {"add_prefix_space", true},
            {"trim_offsets", true},
            {"use_regex", true}}},
          {"model", ByteLevelModel(merges)}};
}

// Writes `json` to a file under the test's temporary directory; returns its path.
inline std::string WriteJson(const nlohmann::json& json, const std::string& name) {
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) / name;
  std::ofstream(path) << json.dump();
  return path.string();
}

// The repository root (FLYWHEEL_SOURCE_DIR, set by ctest).
inline std::string SourceDir() {
  const char* dir = std::getenv("FLYWHEEL_SOURCE_DIR");
  EXPECT_NE(dir, nullptr) << "FLYWHEEL_SOURCE_DIR is not set (ctest sets it)";
  return dir ? dir : ".";
}

}  // namespace flywheel::testing

#endif  // FLYWHEEL_TOKENIZER_TEST_TOKENIZER_JSON_H_
