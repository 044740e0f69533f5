// The added tokens of a tokenizer.json ("added_tokens": special ones such as <|im_start|> and
// plain ones such as <think>): found in the text before pre-tokenization and BPE, so they are
// never split, exactly as Hugging Face tokenizers' AddedVocabulary does.
//
// Matching follows HF's find_matches: the leftmost match, the longest at that position (an
// Aho-Corasick automaton in LeftmostLongest mode there; buckets of literals by first byte here,
// the same matches), then per token:
//   single_word  the match counts only with no word character (\w) just before or after it;
//   lstrip       the match takes the white space before it (not text an earlier match took);
//   rstrip       the match takes the white space after it.
// Tokens with normalized = false are matched in the raw text; tokens with normalized = true in
// the normalizer's output, by their normalized content.
#ifndef FLYWHEEL_TOKENIZER_ADDED_VOCABULARY_H_
#define FLYWHEEL_TOKENIZER_ADDED_VOCABULARY_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "flywheel/tokenizer/normalizer.h"

namespace flywheel {

struct AddedToken {
  int64_t id = -1;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// Literal patterns, found leftmost first and longest at that position.
class LiteralMatcher {
 public:
  void Add(std::string_view pattern, int32_t index);
  bool empty() const { return patterns_.empty(); }
  // The leftmost-longest match starting at or after `from`: true and its [begin, end) and index.
  bool Find(std::string_view text, size_t from, size_t* begin, size_t* end, int32_t* index) const;

 private:
  struct Pattern {
    std::string text;
    int32_t index;
  };
  std::vector<Pattern> patterns_;
  std::array<std::vector<int32_t>, 256> by_first_byte_;  // into patterns_, longest first
};

class AddedVocabulary {
 public:
  // A span of the text: an added token (id >= 0) or text for the next stage (id = -1).
  struct Split {
    size_t begin;
    size_t end;
    int64_t id;
  };

  // Tokens with normalized = true are matched by their content after `normalizer`.
  static absl::StatusOr<AddedVocabulary> Create(std::vector<AddedToken> tokens,
                                                const Normalizer& normalizer);
  AddedVocabulary() = default;

  // Splits `text` around the tokens of one set (normalized = false: `normalized_set` false),
  // as HF's find_matches; the splits cover `text` in order. Empty text gives no split.
  void FindMatches(std::string_view text, bool normalized_set, std::vector<Split>* splits) const;
  bool HasTokens(bool normalized_set) const {
    return !(normalized_set ? normalized_ : raw_).empty();
  }

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  // The token whose content is `content`; nullptr when none.
  const AddedToken* FindByContent(std::string_view content) const;

 private:
  std::vector<AddedToken> tokens_;
  absl::flat_hash_map<std::string, int32_t> by_content_;  // into tokens_
  LiteralMatcher raw_;                                    // normalized = false, by content
  LiteralMatcher normalized_;  // normalized = true, by normalized content
};

}  // namespace flywheel

#endif  // FLYWHEEL_TOKENIZER_ADDED_VOCABULARY_H_
