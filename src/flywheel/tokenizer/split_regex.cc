#include "flywheel/tokenizer/split_regex.h"

#include <re2/re2.h>

#include <vector>

#include "flywheel/core/strings.h"
#include "flywheel/tokenizer/utf8.h"

namespace flywheel {
namespace {

// Oniguruma's \s for UTF-8 (Unicode White_Space), written for an RE2 character class.
constexpr std::string_view kSpaceClass =
    R"(\t\n\x0B\f\r\x20\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

absl::Status Refuse(std::string_view pattern, size_t at, std::string_view why) {
  return absl::UnimplementedError(
      StrCat("regex construct at offset ", at, " of \"", pattern, "\": ", why));
}

// Index just past the character class that opens at pattern[i] ('['), or npos.
size_t SkipClass(std::string_view pattern, size_t i) {
  size_t j = i + 1;
  if (j < pattern.size() && pattern[j] == '^') ++j;
  if (j < pattern.size() && pattern[j] == ']') ++j;  // a literal ] first
  while (j < pattern.size() && pattern[j] != ']') j += pattern[j] == '\\' ? 2 : 1;
  return j < pattern.size() ? j + 1 : std::string_view::npos;
}

// The alternatives of `pattern` at nesting depth 0, in order.
std::vector<std::string_view> TopLevelAlternatives(std::string_view pattern) {
  std::vector<std::string_view> alternatives;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i < pattern.size();) {
    const char c = pattern[i];
    if (c == '\\') {
      i += 2;
    } else if (c == '[') {
      i = SkipClass(pattern, i);
      if (i == std::string_view::npos) return {pattern};  // RE2 reports the error
    } else {
      if (c == '(') ++depth;
      if (c == ')') --depth;
      if (c == '|' && depth == 0) {
        alternatives.push_back(pattern.substr(start, i - start));
        start = i + 1;
      }
      ++i;
    }
  }
  alternatives.push_back(pattern.substr(start));
  return alternatives;
}

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

}  // namespace

bool IsOnigurumaSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

absl::StatusOr<std::string> OnigurumaToRe2(std::string_view p) {
  std::string out;
  out.reserve(p.size() * 2);
  bool in_class = false;
  for (size_t i = 0; i < p.size();) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) return Refuse(p, i, "a trailing backslash");
      const char e = p[i + 1];
      switch (e) {
        case 's':
          out += in_class ? StrCat(kSpaceClass) : StrCat("[", kSpaceClass, "]");
          i += 2;
          continue;
        case 'S':
          if (in_class) return Refuse(p, i, "\\S inside a class has no RE2 form here");
          out += StrCat("[^", kSpaceClass, "]");
          i += 2;
          continue;
        case 'd':
        case 'D':
        case 'w':
        case 'W':
        case 'h':
        case 'H':
          return Refuse(p, i,
                        StrCat("\\", std::string(1, e),
                               " is Unicode in Oniguruma and ASCII in RE2; write the "
                               "class with \\p{…}"));
        case 'b':
        case 'B':
        case 'A':
        case 'z':
        case 'Z':
        case 'G':
        case 'K':
          return Refuse(p, i, StrCat("the assertion \\", std::string(1, e), " is not supported"));
        case 'X':
        case 'R':
        case 'N':
        case 'O':
        case 'k':
        case 'g':
        case 'y':
        case 'Y':
          return Refuse(p, i, StrCat("\\", std::string(1, e), " is not supported"));
        case 'u':
          if (i + 5 < p.size() && IsHex(p[i + 2]) && IsHex(p[i + 3]) && IsHex(p[i + 4]) &&
              IsHex(p[i + 5])) {
            out += StrCat("\\x{", p.substr(i + 2, 4), "}");
            i += 6;
            continue;
          }
          return Refuse(p, i, "\\u needs four hex digits");
        default:
          if (e >= '0' && e <= '9') {
            return Refuse(p, i, "backreferences and octal escapes are not supported");
          }
          if ((e == 'p' || e == 'P') && i + 2 < p.size() && p[i + 2] == '{') {
            const size_t close = p.find('}', i + 2);
            if (close == std::string_view::npos) return Refuse(p, i, "an unclosed \\p{");
            out += p.substr(i, close + 1 - i);
            i = close + 1;
            continue;
          }
          out += p.substr(i, 2);  // \n \t \. \| \p L … mean the same in both; RE2 checks the rest
          i += 2;
          continue;
      }
    }
    if (in_class) {
      if (c == '[') {
        return Refuse(p, i, "nested classes and POSIX brackets ([:alpha:]) are not supported");
      }
      if (c == ']') in_class = false;
      out += c;
      ++i;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < p.size() && p[i] == '^') out += p[i++];
      if (i < p.size() && p[i] == ']') out += p[i++];  // a literal ] first
      continue;
    }
    if (c == '^' || c == '$') {
      return Refuse(p, i, "^ and $ are line anchors in Oniguruma's Ruby syntax; not supported");
    }
    if (c == '{' && i + 1 < p.size() && p[i + 1] == ',') {
      return Refuse(p, i, "{,n} is {0,n} in Oniguruma but literal in RE2; write {0,n}");
    }
    if (c == '(' && i + 1 < p.size() && p[i + 1] == '?') {
      const std::string_view rest = p.substr(i + 2);
      for (std::string_view ok : {":", "i:", "i)", "-i:", "-i)"}) {
        if (rest.starts_with(ok)) {
          out += StrCat("(?", ok);
          i += 2 + ok.size();
          goto next;
        }
      }
      if (rest.starts_with("=") || rest.starts_with("!") || rest.starts_with("<=") ||
          rest.starts_with("<!")) {
        return Refuse(p, i,
                      "lookaround is not supported (only a final \\s+(?!\\S)|\\s+ is emulated)");
      }
      return Refuse(p, i,
                    "only (?:…) groups and the inline flag i are supported (no atomic or named "
                    "groups, comments, or flags m, x, s)");
    }
    out += c;
    ++i;
  next:;
  }
  if (in_class) return Refuse(p, p.size(), "an unclosed character class");
  return out;
}

SplitRegex::SplitRegex(SplitRegex&&) noexcept = default;
SplitRegex& SplitRegex::operator=(SplitRegex&&) noexcept = default;
SplitRegex::~SplitRegex() = default;

absl::StatusOr<SplitRegex> SplitRegex::Compile(std::string_view pattern, bool literal) {
  SplitRegex split;
  split.pattern_ = std::string(pattern);
  std::string whole;
  std::string earlier;
  if (literal) {
    whole = RE2::QuoteMeta(re2::StringPiece(pattern.data(), pattern.size()));
  } else {
    std::vector<std::string_view> alternatives = TopLevelAlternatives(pattern);
    const size_t n = alternatives.size();
    if (n >= 2 && alternatives[n - 2] == R"(\s+(?!\S))" && alternatives[n - 1] == R"(\s+)") {
      auto space = OnigurumaToRe2(R"(\s+)");
      if (!space.ok()) return space.status();
      if (n == 2) {
        split.lookahead_only_ = true;
        whole = *space;
      } else {
        // everything before the '|' that opens \s+(?!\S)
        const std::string earlier_pattern(
            pattern.substr(0, alternatives[n - 2].data() - pattern.data() - 1));
        auto translated = OnigurumaToRe2(earlier_pattern);
        if (!translated.ok()) return translated.status();
        earlier = StrCat("(?:", *translated, ")");
        whole = StrCat(earlier, "|", *space);
      }
    } else {
      auto translated = OnigurumaToRe2(pattern);
      if (!translated.ok()) return translated.status();
      whole = *std::move(translated);
    }
  }
  RE2::Options options;
  options.set_log_errors(false);
  options.set_max_mem(int64_t{64} << 20);  // room for the DFA of large Unicode classes
  split.regex_ = std::make_unique<RE2>(whole, options);
  if (!split.regex_->ok()) {
    return absl::InvalidArgumentError(
        StrCat("regex \"", pattern, "\" (as RE2: \"", whole, "\"): ", split.regex_->error()));
  }
  if (RE2::FullMatch("", *split.regex_)) {
    return absl::InvalidArgumentError(
        StrCat("regex \"", pattern, "\" matches the empty string; a Split pattern must not"));
  }
  if (!earlier.empty()) {
    split.earlier_ = std::make_unique<RE2>(earlier, options);
    if (!split.earlier_->ok()) {
      return absl::InvalidArgumentError(
          StrCat("regex \"", pattern, "\": ", split.earlier_->error()));
    }
  }
  return split;
}

size_t SplitRegex::LookaheadEnd(std::string_view text, size_t start, size_t end) const {
  if (end == text.size()) return end;  // (?!\S) holds at the end of the text
  size_t chars = 0;
  for (size_t i = start; i < end;) {
    char32_t c;
    i += DecodeUtf8(text, i, &c);
    if (!IsOnigurumaSpace(c)) return end;  // not a white-space run: an earlier alternative's
    ++chars;
  }
  if (chars < 2) return end;  // \s+(?!\S) fails; \s+ takes the one character
  if (earlier_ != nullptr && earlier_->Match(re2::StringPiece(text.data(), text.size()), start,
                                             text.size(), RE2::ANCHOR_START, nullptr, 0)) {
    return end;  // an earlier alternative matched here, and leftmost-first took it
  }
  return start + LastCharStart(text.substr(start, end - start));
}

void SplitRegex::Split(std::string_view text,
                       absl::FunctionRef<void(std::string_view)> piece) const {
  const re2::StringPiece input(text.data(), text.size());
  const bool lookahead = emulates_whitespace_lookahead();
  size_t pos = 0;
  re2::StringPiece match;
  // Most matches start where the last one ended: an anchored match finds them with one forward
  // DFA pass, where an unanchored one also runs the reverse DFA to find the start. A match at
  // `pos` is the leftmost one, so both give the same; only when there is none (a stretch of
  // text between matches follows) is the unanchored search needed.
  while (pos < text.size() &&
         (regex_->Match(input, pos, text.size(), RE2::ANCHOR_START, &match, 1) ||
          regex_->Match(input, pos, text.size(), RE2::UNANCHORED, &match, 1))) {
    const size_t start = static_cast<size_t>(match.data() - input.data());
    size_t end = start + match.size();
    if (lookahead) end = LookaheadEnd(text, start, end);
    if (start > pos) piece(text.substr(pos, start - pos));
    piece(text.substr(start, end - start));
    pos = end;
  }
  if (pos < text.size()) piece(text.substr(pos));
}

}  // namespace flywheel
