// UTF-8 as the Hugging Face tokenizers pipeline sees it: validation (Encode takes valid UTF-8
// only, or repairs it), and the lossy decoding of token bytes, where every maximal invalid
// subpart becomes one U+FFFD (Unicode's "substitution of maximal subparts", which Rust's
// String::from_utf8_lossy and so HF's ByteLevel decoder follow).
#ifndef FLYWHEEL_TOKENIZER_UTF8_H_
#define FLYWHEEL_TOKENIZER_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace flywheel {

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// Byte offset of the first byte that does not start a complete, valid UTF-8 sequence;
// nullopt when `text` is valid.
std::optional<size_t> FirstInvalidUtf8(std::string_view text);

// Appends `bytes` to `out` as valid UTF-8, each maximal invalid subpart replaced by U+FFFD.
// When `final` is false, a trailing valid but incomplete sequence (a character whose remaining
// bytes may still come) is not consumed: the return value is the number of bytes consumed, so
// bytes.substr(return value) is that held tail (at most 3 bytes). With `final` true everything
// is consumed.
size_t AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out);

inline std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  AppendUtf8Lossy(bytes, /*final=*/true, &out);
  return out;
}

// Decodes the code point of the valid UTF-8 sequence at text[pos]; returns its length in bytes.
size_t DecodeUtf8(std::string_view text, size_t pos, char32_t* code_point);

// Start of the last character of a non-empty valid UTF-8 `text`.
size_t LastCharStart(std::string_view text);

void AppendUtf8(char32_t code_point, std::string* out);

// True when every byte is below 0x80.
bool IsAscii(std::string_view text);

}  // namespace flywheel

#endif  // FLYWHEEL_TOKENIZER_UTF8_H_
