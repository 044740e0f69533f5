// GPT-2's byte-level alphabet, as Hugging Face's ByteLevel pre-tokenizer and decoder use it:
// every byte maps to one printable character (the printable Latin-1 bytes to themselves, the
// other 68 to U+0100.. in order), so that a BPE vocabulary over these characters can spell any
// byte string. Vocabulary entries in tokenizer.json are written in this alphabet ("Ġworld" is
// " world").
#ifndef FLYWHEEL_TOKENIZER_BYTE_LEVEL_H_
#define FLYWHEEL_TOKENIZER_BYTE_LEVEL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace flywheel {

// The character byte `b` maps to.
char32_t ByteLevelChar(uint8_t b);

// The byte that character `c` stands for; nullopt when `c` is not in the alphabet.
std::optional<uint8_t> ByteLevelByte(char32_t c);

// `bytes` written in the byte-level alphabet (UTF-8 of the mapped characters).
std::string ByteLevelEncode(std::string_view bytes);

// The bytes a token of the byte-level alphabet stands for; nullopt when some character of
// `token` (valid UTF-8) is not in the alphabet.
std::optional<std::string> ByteLevelDecode(std::string_view token);

// What HF's ByteLevel decoder emits for one token: its bytes when every character is in the
// alphabet, otherwise the token's own UTF-8 unchanged (so "<|im_end|>" decodes to itself, and so
// does an added token with a space in it).
std::string ByteLevelTokenBytes(std::string_view token);

}  // namespace flywheel

#endif  // FLYWHEEL_TOKENIZER_BYTE_LEVEL_H_
