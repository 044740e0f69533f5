// Word-level tokenizer over a vocabulary an environment declares (e.g. the moves and numbers of
// a puzzle): ids 0 BOS, 1 EOS, 2 end-of-turn, 3 <unk>, then the words in the given order.
// Text is split on whitespace; decoding joins words with one space. A word outside the
// vocabulary is an error naming it, or <unk> when `allow_unknown`.
#ifndef FLYWHEEL_MODEL_WORD_TOKENIZER_H_
#define FLYWHEEL_MODEL_WORD_TOKENIZER_H_

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "flywheel/model/tokenizer.h"

namespace flywheel {

class WordTokenizer : public Tokenizer {
 public:
  static constexpr int64_t kUnknown = 3;
  static constexpr int64_t kFirstWord = 4;

  // Errors for an empty vocabulary, an empty word, a word with whitespace, or a duplicate.
  static absl::StatusOr<std::unique_ptr<WordTokenizer>> Create(std::vector<std::string> words,
                                                               bool allow_unknown = false);

  int64_t vocab_size() const override { return kFirstWord + static_cast<int64_t>(words_.size()); }
  const SpecialTokens& special() const override { return special_; }
  absl::StatusOr<std::vector<int64_t>> Encode(std::string_view text) const override;
  absl::StatusOr<std::string> Decode(const std::vector<int64_t>& ids) const override;
  std::string DebugString() const override;

 private:
  WordTokenizer(std::vector<std::string> words, bool allow_unknown);
  std::vector<std::string> words_;
  std::unordered_map<std::string, int64_t> ids_;
  bool allow_unknown_;
  SpecialTokens special_{0, 1, 2};
};

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_WORD_TOKENIZER_H_
