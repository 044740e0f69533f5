#include "flywheel/tokenizer/utf8.h"

#include <cstring>

namespace flywheel {
namespace {

// Length of the valid UTF-8 sequence at bytes[pos] (1..4), or 0 with *subpart set to the
// length of the maximal invalid subpart there (1..3), or 0 with *subpart = 0 when the bytes end
// inside a sequence that is valid so far (*incomplete = its length so far).
struct SequenceCheck {
  size_t valid = 0;       // length of a complete valid sequence
  size_t subpart = 0;     // length of the maximal invalid subpart
  size_t incomplete = 0;  // bytes of a valid prefix cut by the end of the input
};

SequenceCheck CheckSequence(const unsigned char* p, size_t n) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return {1, 0, 0};
  size_t need;                         // continuation bytes after the lead
  unsigned char lo = 0x80, hi = 0xBF;  // range of the first continuation byte (Table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 == 0xE0) {
    need = 2, lo = 0xA0;
  } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
    need = 2;
  } else if (b0 == 0xED) {
    need = 2, hi = 0x9F;  // no surrogates
  } else if (b0 == 0xF0) {
    need = 3, lo = 0x90;
  } else if (b0 >= 0xF1 && b0 <= 0xF3) {
    need = 3;
  } else if (b0 == 0xF4) {
    need = 3, hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {0, 1, 0};  // C0, C1, F5..FF, or a continuation byte without a lead
  }
  for (size_t k = 1; k <= need; ++k) {
    if (k >= n) return {0, 0, k};
    const unsigned char b = p[k];
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {0, k, 0};
  }
  return {need + 1, 0, 0};
}

}  // namespace

bool IsAscii(std::string_view text) {
  const char* p = text.data();
  size_t n = text.size();
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    if (word & 0x8080808080808080ULL) return false;
    p += 8;
    n -= 8;
  }
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<unsigned char>(p[i]) >= 0x80) return false;
  }
  return true;
}

std::optional<size_t> FirstInvalidUtf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const SequenceCheck c = CheckSequence(p + i, n - i);
    if (c.valid == 0) return i;
    i += c.valid;
  }
  return std::nullopt;
}

size_t AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  size_t run = 0;  // start of the current run of valid bytes, appended in one go
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const SequenceCheck c = CheckSequence(p + i, n - i);
    if (c.valid > 0) {
      i += c.valid;
      continue;
    }
    out->append(bytes.data() + run, i - run);
    if (c.incomplete > 0 && !final) return i;  // hold the tail: its bytes may still come
    out->append(kReplacementCharacter);
    i += c.subpart > 0 ? c.subpart : c.incomplete;
    run = i;
  }
  out->append(bytes.data() + run, n - run);
  return n;
}

size_t DecodeUtf8(std::string_view text, size_t pos, char32_t* code_point) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  const unsigned char b0 = p[0];
  if (b0 < 0x80) {
    *code_point = b0;
    return 1;
  }
  if (b0 < 0xE0) {
    *code_point = (char32_t{b0} & 0x1F) << 6 | (p[1] & 0x3F);
    return 2;
  }
  if (b0 < 0xF0) {
    *code_point = (char32_t{b0} & 0x0F) << 12 | char32_t{p[1] & 0x3Fu} << 6 | (p[2] & 0x3F);
    return 3;
  }
  *code_point = (char32_t{b0} & 0x07) << 18 | char32_t{p[1] & 0x3Fu} << 12 |
                char32_t{p[2] & 0x3Fu} << 6 | (p[3] & 0x3F);
  return 4;
}

size_t LastCharStart(std::string_view text) {
  size_t i = text.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
  return i;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

}  // namespace flywheel
