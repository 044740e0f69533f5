// What an environment's text is made of, so that the model side can build a tokenizer for it.
// Environments only declare the vocabulary; tokenizers live in model/.
#ifndef FLYWHEEL_ENV_VOCABULARY_H_
#define FLYWHEEL_ENV_VOCABULARY_H_

#include <string>
#include <vector>

namespace flywheel {

struct VocabularySpec {
  // kWords: observations and actions are `words` separated by single spaces (a small, closed
  // list; a tiny model learns it quickly). kBytes: arbitrary text, tokenized byte by byte.
  enum Kind { kWords, kBytes };
  Kind kind = kBytes;
  std::vector<std::string> words;  // kWords only; no duplicates, none containing a space

  static VocabularySpec Bytes() { return {}; }
  static VocabularySpec Words(std::vector<std::string> words) { return {kWords, std::move(words)}; }
};

// True when every space-separated word of `text` is in `spec` (always true for kBytes).
bool InVocabulary(const VocabularySpec& spec, const std::string& text);

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_VOCABULARY_H_
