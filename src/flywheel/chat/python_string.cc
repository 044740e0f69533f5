#include "flywheel/chat/python_string.h"

#include <algorithm>

#include "absl/status/status.h"
#include "flywheel/core/strings.h"

namespace flywheel::jinja {
namespace {

// Blocks that hold letters with a case in Unicode. Python maps them; flywheel refuses them
// (see the header) rather than leave them unchanged.
bool IsCasedOutsideAscii(char32_t c) {
  struct Range {
    char32_t first, last;
  };
  static constexpr Range kCased[] = {
      {0x00B5, 0x00B5},   {0x00C0, 0x00D6},   {0x00D8, 0x00F6},   {0x00F8, 0x02AF},
      {0x0345, 0x0345},   {0x0370, 0x058F},   {0x10A0, 0x10FF},   {0x13A0, 0x13FF},
      {0x1C80, 0x1CBF},   {0x1D00, 0x1DBF},   {0x1E00, 0x1FFF},   {0x2100, 0x214F},
      {0x2160, 0x2188},   {0x24B6, 0x24E9},   {0x2C00, 0x2D2F},   {0xA640, 0xA69F},
      {0xA720, 0xA7FF},   {0xAB30, 0xABBF},   {0xFB00, 0xFB17},   {0xFF21, 0xFF3A},
      {0xFF41, 0xFF5A},   {0x10400, 0x104FF}, {0x10570, 0x105FF}, {0x10C80, 0x10CFF},
      {0x118A0, 0x118FF}, {0x16E40, 0x16E9F}, {0x1D400, 0x1D7FF}, {0x1E900, 0x1E95F},
  };
  for (const Range& r : kCased) {
    if (c >= r.first && c <= r.last) return true;
  }
  return false;
}

bool IsAsciiLower(char32_t c) { return c >= 'a' && c <= 'z'; }
bool IsAsciiUpper(char32_t c) { return c >= 'A' && c <= 'Z'; }
char32_t ToUpper(char32_t c) { return IsAsciiLower(c) ? c - 'a' + 'A' : c; }
char32_t ToLower(char32_t c) { return IsAsciiUpper(c) ? c - 'A' + 'a' : c; }

absl::Status CheckCaseMappable(const std::u32string& text, std::string_view method) {
  for (char32_t c : text) {
    if (c >= 0x80 && IsCasedOutsideAscii(c)) {
      return absl::UnimplementedError(
          fmt::format("str.{}() of U+{:04X}: case mapping is implemented for ASCII letters only",
                      method, static_cast<uint32_t>(c)));
    }
  }
  return absl::OkStatus();
}

bool InChars(char32_t c, const std::u32string* chars) {
  if (chars == nullptr) return IsPythonWhitespace(c);
  return chars->find(c) != std::u32string::npos;
}

}  // namespace

std::u32string DecodeUtf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    int extra = 0;
    char32_t c = 0;
    if (b < 0x80) {
      c = b;
    } else if ((b & 0xE0) == 0xC0) {
      c = b & 0x1F, extra = 1;
    } else if ((b & 0xF0) == 0xE0) {
      c = b & 0x0F, extra = 2;
    } else if ((b & 0xF8) == 0xF0) {
      c = b & 0x07, extra = 3;
    } else {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    bool ok = true;
    for (int k = 1; k <= extra; ++k) {
      if (i + k >= text.size()) {
        ok = false;
        break;
      }
      const auto cont = static_cast<unsigned char>(text[i + k]);
      if ((cont & 0xC0) != 0x80) {
        ok = false;
        break;
      }
      c = (c << 6) | (cont & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(c);
    i += extra + 1;
  }
  return out;
}

void AppendUtf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string EncodeUtf8(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points) AppendUtf8(c, out);
  return out;
}

int64_t CodePointLength(std::string_view text) {
  int64_t n = 0;
  for (char ch : text) {
    if ((static_cast<unsigned char>(ch) & 0xC0) != 0x80) ++n;
  }
  return n;
}

bool IsPythonWhitespace(char32_t c) {
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

absl::StatusOr<std::vector<int64_t>> SliceIndices(int64_t length, std::optional<int64_t> start,
                                                  std::optional<int64_t> stop,
                                                  std::optional<int64_t> step) {
  // CPython's PySlice_AdjustIndices.
  const int64_t s = step.value_or(1);
  if (s == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) -> int64_t {
    if (!v.has_value()) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += length;
      if (x < 0) x = s < 0 ? -1 : 0;
    } else if (x >= length) {
      x = s < 0 ? length - 1 : length;
    }
    return x;
  };
  const int64_t lo = adjust(start, s < 0 ? length - 1 : 0);
  const int64_t hi = adjust(stop, s < 0 ? -1 : length);
  std::vector<int64_t> out;
  if (s > 0) {
    for (int64_t i = lo; i < hi; i += s) out.push_back(i);
  } else {
    for (int64_t i = lo; i > hi; i += s) out.push_back(i);
  }
  return out;
}

std::string PyStrip(std::string_view text, const std::optional<std::string>& chars, bool left,
                    bool right) {
  const std::u32string cps = DecodeUtf8(text);
  std::u32string set;
  if (chars.has_value()) set = DecodeUtf8(*chars);
  const std::u32string* set_ptr = chars.has_value() ? &set : nullptr;
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && InChars(cps[b], set_ptr)) ++b;
  }
  if (right) {
    while (e > b && InChars(cps[e - 1], set_ptr)) --e;
  }
  return EncodeUtf8(std::u32string_view(cps).substr(b, e - b));
}

absl::StatusOr<std::vector<std::string>> PySplit(std::string_view text,
                                                 const std::optional<std::string>& sep,
                                                 int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep.has_value()) {
    if (sep->empty()) return absl::InvalidArgumentError("str.split(): empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        const size_t found = text.find(*sep, pos);
        if (found == std::string_view::npos) break;
        parts.emplace_back(text.substr(pos, found - pos));
        pos = found + sep->size();
      }
      parts.emplace_back(text.substr(pos));
    } else {
      size_t end = text.size();
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        if (end < sep->size()) break;
        const size_t found = text.rfind(*sep, end - sep->size());
        if (found == std::string_view::npos) break;
        parts.emplace_back(text.substr(found + sep->size(), end - found - sep->size()));
        end = found;
      }
      parts.emplace_back(text.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  // Whitespace runs; leading and trailing whitespace never make empty pieces.
  const std::u32string cps = DecodeUtf8(text);
  const int64_t n = static_cast<int64_t>(cps.size());
  if (!from_right) {
    int64_t i = 0;
    while (true) {
      while (i < n && IsPythonWhitespace(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        int64_t e = n;
        while (e > i && IsPythonWhitespace(cps[e - 1])) --e;
        parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(i, e - i)));
        break;
      }
      int64_t j = i;
      while (j < n && !IsPythonWhitespace(cps[j])) ++j;
      parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(i, j - i)));
      i = j;
    }
  } else {
    int64_t i = n;
    while (true) {
      while (i > 0 && IsPythonWhitespace(cps[i - 1])) --i;
      if (i <= 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        int64_t b = 0;
        while (b < i && IsPythonWhitespace(cps[b])) ++b;
        parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(b, i - b)));
        break;
      }
      int64_t j = i;
      while (j > 0 && !IsPythonWhitespace(cps[j - 1])) --j;
      parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(j, i - j)));
      i = j;
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::string PyReplace(std::string_view text, std::string_view old_text, std::string_view new_text,
                      int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old_text.empty()) {
    const std::u32string cps = DecodeUtf8(text);
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        out.append(new_text);
        ++done;
      }
      AppendUtf8(c, out);
    }
    if (count < 0 || done < count) out.append(new_text);
    return out;
  }
  size_t pos = 0;
  while (count < 0 || done < count) {
    const size_t found = text.find(old_text, pos);
    if (found == std::string_view::npos) break;
    out.append(text.substr(pos, found - pos));
    out.append(new_text);
    pos = found + old_text.size();
    ++done;
  }
  out.append(text.substr(pos));
  return out;
}

absl::StatusOr<std::string> PyUpper(std::string_view text) {
  std::u32string cps = DecodeUtf8(text);
  if (absl::Status s = CheckCaseMappable(cps, "upper"); !s.ok()) return s;
  for (char32_t& c : cps) c = ToUpper(c);
  return EncodeUtf8(cps);
}

absl::StatusOr<std::string> PyLower(std::string_view text) {
  std::u32string cps = DecodeUtf8(text);
  if (absl::Status s = CheckCaseMappable(cps, "lower"); !s.ok()) return s;
  for (char32_t& c : cps) c = ToLower(c);
  return EncodeUtf8(cps);
}

absl::StatusOr<std::string> PyTitle(std::string_view text) {
  std::u32string cps = DecodeUtf8(text);
  if (absl::Status s = CheckCaseMappable(cps, "title"); !s.ok()) return s;
  // A cased letter after an uncased character starts a word (so "they're" is "They'Re").
  bool previous_cased = false;
  for (char32_t& c : cps) {
    const bool cased = IsAsciiLower(c) || IsAsciiUpper(c);
    if (cased) c = previous_cased ? ToLower(c) : ToUpper(c);
    previous_cased = cased;
  }
  return EncodeUtf8(cps);
}

absl::StatusOr<std::string> PyCapitalize(std::string_view text) {
  std::u32string cps = DecodeUtf8(text);
  if (absl::Status s = CheckCaseMappable(cps, "capitalize"); !s.ok()) return s;
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? ToUpper(cps[i]) : ToLower(cps[i]);
  return EncodeUtf8(cps);
}

}  // namespace flywheel::jinja
