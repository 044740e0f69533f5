#include "flywheel/tokenizer/byte_level.h"

#include <array>

#include "flywheel/tokenizer/utf8.h"

namespace flywheel {
namespace {

bool MapsToItself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

// bytes_to_unicode() of GPT-2's encoder.py.
struct Alphabet {
  std::array<char32_t, 256> char_of_byte{};
  std::array<int16_t, 512> byte_of_char{};  // -1: not in the alphabet; chars are below U+0200
  Alphabet() {
    byte_of_char.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      char_of_byte[b] = MapsToItself(b) ? static_cast<char32_t>(b) : next++;
      byte_of_char[char_of_byte[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& TheAlphabet() {
  static const Alphabet* alphabet = new Alphabet();
  return *alphabet;
}

}  // namespace

char32_t ByteLevelChar(uint8_t b) { return TheAlphabet().char_of_byte[b]; }

std::optional<uint8_t> ByteLevelByte(char32_t c) {
  if (c >= 512) return std::nullopt;
  const int16_t b = TheAlphabet().byte_of_char[c];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

std::string ByteLevelEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) AppendUtf8(ByteLevelChar(b), &out);
  return out;
}

std::optional<std::string> ByteLevelDecode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    char32_t c;
    i += DecodeUtf8(token, i, &c);
    const std::optional<uint8_t> b = ByteLevelByte(c);
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

std::string ByteLevelTokenBytes(std::string_view token) {
  std::optional<std::string> bytes = ByteLevelDecode(token);
  return bytes ? *std::move(bytes) : std::string(token);
}

}  // namespace flywheel
