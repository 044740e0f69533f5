#include "flywheel/tokenizer/bpe_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "flywheel/tokenizer/byte_level.h"
#include "flywheel/tokenizer/test_tokenizer_json.h"

namespace flywheel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Merges = std::vector<std::pair<std::string, std::string>>;

BpeModel Model(const Merges& merges, bool ignore_merges = false) {
  nlohmann::json json = testing::ByteLevelModel(merges);
  json["ignore_merges"] = ignore_merges;
  auto model = BpeModel::FromJson(json);
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

std::vector<std::string> Pieces(const BpeModel& model, std::string_view word,
                                BpeModel::Strategy strategy = BpeModel::Strategy::kAuto) {
  std::vector<int64_t> ids;
  if (strategy == BpeModel::Strategy::kAuto) {
    model.Tokenize(word, &ids);
  } else {
    model.Merge(word, strategy, &ids);
  }
  std::vector<std::string> out;
  for (int64_t id : ids) out.push_back(*ByteLevelDecode(*model.TokenText(id)));
  return out;
}

TEST(BpeModelTest, LowestRankMergesFirst) {
  // b+c outranks a+b, so "abc" becomes a|bc, then abc through the third merge
  const BpeModel m1 = Model({{"b", "c"}, {"a", "b"}, {"a", "bc"}});
  EXPECT_THAT(Pieces(m1, "abc"), ElementsAre("abc"));
  EXPECT_THAT(Pieces(m1, "abd"), ElementsAre("ab", "d"));
  // with a+b first, "abc" is ab|c and there is no ab+c merge
  const BpeModel m2 = Model({{"a", "b"}, {"b", "c"}, {"a", "bc"}});
  EXPECT_THAT(Pieces(m2, "abc"), ElementsAre("ab", "c"));
}

TEST(BpeModelTest, LeftmostOfEqualRanks) {
  const BpeModel m = Model({{"a", "a"}, {"aa", "aa"}});
  EXPECT_THAT(Pieces(m, "aaa"), ElementsAre("aa", "a"));
  EXPECT_THAT(Pieces(m, "aaaa"), ElementsAre("aaaa"));
  EXPECT_THAT(Pieces(m, "aaaaa"), ElementsAre("aaaa", "a"));
}

TEST(BpeModelTest, IgnoreMergesTakesWholeTokens) {
  // "ab" is reachable; "abc" is in the vocabulary only through a merge that never applies
  // before a+b… so without ignore_merges "abc" stays ab|c
  const Merges merges = {{"a", "b"}, {"b", "c"}, {"a", "bc"}};
  EXPECT_THAT(Pieces(Model(merges), "abc"), ElementsAre("ab", "c"));
  EXPECT_THAT(Pieces(Model(merges, /*ignore_merges=*/true), "abc"), ElementsAre("abc"));
}

// The plain definition of BPE on strings: apply the lowest-ranked merge at its leftmost place.
std::vector<std::string> BruteForce(const Merges& merges, std::string_view word) {
  std::vector<std::string> symbols;
  for (char c : word) symbols.emplace_back(1, c);
  while (true) {
    size_t best_rank = merges.size(), best_pos = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      for (size_t r = 0; r < best_rank; ++r) {
        if (merges[r].first == symbols[i] && merges[r].second == symbols[i + 1]) {
          best_rank = r;
          best_pos = i;
          break;
        }
      }
    }
    if (best_rank == merges.size()) return symbols;
    symbols[best_pos] += symbols[best_pos + 1];
    symbols.erase(symbols.begin() + best_pos + 1);
  }
}

TEST(BpeModelTest, ScanAndQueueMatchTheDefinition) {
  std::mt19937_64 rng(7);
  // random merges over a four-letter alphabet, each joining two known symbols
  std::vector<std::string> known = {"a", "b", "c", "d"};
  Merges merges;
  while (merges.size() < 60) {
    const std::string& l = known[rng() % known.size()];
    const std::string& r = known[rng() % known.size()];
    if (l.size() + r.size() > 8) continue;
    bool repeated = false;
    for (const auto& m : merges) repeated = repeated || (m.first == l && m.second == r);
    if (repeated) continue;
    merges.emplace_back(l, r);
    known.push_back(l + r);
  }
  const BpeModel model = Model(merges);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string word;
    const size_t n = 1 + rng() % (trial < 1000 ? 20 : 200);
    for (size_t i = 0; i < n; ++i) word.push_back("abcd"[rng() % 4]);
    const std::vector<std::string> want = BruteForce(merges, word);
    ASSERT_EQ(Pieces(model, word, BpeModel::Strategy::kScan), want) << word;
    ASSERT_EQ(Pieces(model, word, BpeModel::Strategy::kQueue), want) << word;
  }
}

TEST(BpeModelTest, MergesAsStringsOrPairs) {
  nlohmann::json json = testing::ByteLevelModel({{"a", "b"}, {"ab", "c"}});
  json["merges"] = {"#version: 0.2", "a b", "ab c"};  // legacy merges.txt lines
  auto model = BpeModel::FromJson(json);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_THAT(Pieces(*model, "abc"), ElementsAre("abc"));
  EXPECT_EQ(model->num_merges(), 2);
}

TEST(BpeModelTest, TokenIdAndText) {
  const BpeModel m = Model({{" ", "w"}});
  const std::string gw = ByteLevelEncode(" w");  // "Ġw"
  ASSERT_TRUE(m.TokenId(gw).has_value());
  EXPECT_EQ(*m.TokenText(*m.TokenId(gw)), gw);
  EXPECT_FALSE(m.TokenId(" w").has_value());  // vocabulary text is in the byte-level alphabet
  EXPECT_FALSE(m.TokenText(100000).has_value());
  EXPECT_EQ(m.size(), 257);
}

void ExpectRefused(nlohmann::json json, std::string_view path) {
  auto model = BpeModel::FromJson(json);
  ASSERT_FALSE(model.ok()) << json.dump().substr(0, 200);
  EXPECT_THAT(std::string(model.status().message()), HasSubstr(std::string(path)));
}

TEST(BpeModelTest, RefusesWhatItDoesNotImplement) {
  const nlohmann::json base = testing::ByteLevelModel({{"a", "b"}});
  auto with = [&](const char* key, nlohmann::json value) {
    nlohmann::json j = base;
    j[key] = std::move(value);
    return j;
  };
  ExpectRefused(with("type", "Unigram"), "model.type = \"Unigram\"");
  ExpectRefused(with("type", "WordPiece"), "model.type");
  ExpectRefused(with("byte_fallback", true), "model.byte_fallback");
  ExpectRefused(with("dropout", 0.1), "model.dropout");
  ExpectRefused(with("continuing_subword_prefix", "##"), "model.continuing_subword_prefix");
  ExpectRefused(with("end_of_word_suffix", "</w>"), "model.end_of_word_suffix");
  ExpectRefused(with("something_new", 1), "model.something_new");
  ExpectRefused(with("merges", {"a"}), "model.merges[0]");
  ExpectRefused(with("merges", {"a b", "x q"}), "model.merges[1]");
  ExpectRefused(with("unk_token", "<unk>"), "model.unk_token");
  nlohmann::json no_byte = base;
  no_byte["vocab"].erase(ByteLevelEncode("\n"));
  ExpectRefused(no_byte, "no token for byte 10");
  // One id near 2^31 among 258 tokens once made the loader allocate a 32 GB table.
  nlohmann::json sparse = base;
  sparse["vocab"]["far"] = 999999259;
  ExpectRefused(sparse, "model.vocab[\"far\"] = 999999259: ids of");
  ExpectRefused(sparse, "must be below");
  nlohmann::json gaps = base;
  gaps["vocab"]["near"] = 65536;
  EXPECT_TRUE(BpeModel::FromJson(gaps).ok());
}

}  // namespace
}  // namespace flywheel
