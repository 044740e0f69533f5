// A deterministic corpus for checking a tokenizer against Hugging Face's and for timing it:
// strings drawn from a fixed generator (same count and seed, same strings on every machine),
// in categories chosen to reach every rule of a byte-level BPE tokenizer.json:
//
//   english      sentences, punctuation, contractions in every case ('S 'LL 'Ve …)
//   code         C++/Python/JSON/shell with indentation by spaces and tabs, operators
//   cjk          Chinese, Japanese, Korean; long runs without spaces
//   emoji        emoji, skin tones, ZWJ families, flags, keycaps, variation selectors
//   scripts      Arabic, Hebrew, Hindi, Cyrillic, Greek, Thai mixed with Latin and digits
//   whitespace   runs of spaces, tabs, \r\n, \v \f, NBSP, U+3000, U+2028 …, leading/trailing
//   numbers      1 to 40 digits, decimals, separators, Arabic-Indic and fullwidth digits
//   special      added/special tokens of Qwen and Llama-3 inside text, and near misses
//   long         long words, URLs, base64, 1-2 kB runs of one character, long CJK runs
//   nfc          decomposed accents, Hangul jamo, compatibility ideographs (NFC changes them)
//   random       code points from many blocks, controls and NUL included
#ifndef FLYWHEEL_TOKENIZER_TOKENIZER_CORPUS_H_
#define FLYWHEEL_TOKENIZER_TOKENIZER_CORPUS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace flywheel {

struct CorpusText {
  std::string category;
  std::string text;  // valid UTF-8
};

// `count` strings, the categories in turn.
std::vector<CorpusText> TokenizerCorpus(size_t count, uint64_t seed = 2024);

// Total bytes of the texts.
size_t CorpusBytes(const std::vector<CorpusText>& corpus);

}  // namespace flywheel

#endif  // FLYWHEEL_TOKENIZER_TOKENIZER_CORPUS_H_
