#include "flywheel/chat/jinja_lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "absl/status/status.h"
#include "flywheel/chat/python_string.h"
#include "flywheel/core/strings.h"

namespace flywheel::jinja {
namespace {

absl::Status SyntaxError(int line, std::string_view message) {
  return absl::InvalidArgumentError(StrCat("line ", line, ": ", message));
}

// \r\n and \r become \n; one trailing newline goes (Jinja's keep_trailing_newline=False).
std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  return out;
}

// The code point at `pos` and its length in bytes.
char32_t CodePointAt(std::string_view s, size_t pos, size_t* length) {
  const auto b = static_cast<unsigned char>(s[pos]);
  const size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : 4;
  *length = std::min(n, s.size() - pos);
  const std::u32string cp = DecodeUtf8(s.substr(pos, *length));
  return cp.empty() ? 0xFFFD : cp[0];
}

// Bytes of whitespace (Python's \s) starting at `pos`.
size_t WhitespaceRun(std::string_view s, size_t pos) {
  size_t end = pos;
  while (end < s.size()) {
    size_t len = 0;
    if (!IsPythonWhitespace(CodePointAt(s, end, &len))) break;
    end += len;
  }
  return end - pos;
}

int CountNewlines(std::string_view s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

// Python string-literal escapes (Jinja decodes literals with "unicode-escape").
absl::StatusOr<std::string> DecodeStringLiteral(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 >= body.size()) {
      out.push_back(body[i]);
      continue;
    }
    const char e = body[++i];
    auto hex = [&](int digits) -> absl::StatusOr<char32_t> {
      if (i + digits >= body.size()) {
        return SyntaxError(line, "truncated \\x, \\u or \\U escape in a string literal");
      }
      const std::string h(body.substr(i + 1, digits));
      char* end = nullptr;
      const unsigned long v = std::strtoul(h.c_str(), &end, 16);
      if (end != h.c_str() + digits) {
        return SyntaxError(line, "truncated \\x, \\u or \\U escape in a string literal");
      }
      i += digits;
      return static_cast<char32_t>(v);
    };
    switch (e) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case '\n':
        break;  // a backslash-newline continues the line
      case 'x':
      case 'u':
      case 'U': {
        absl::StatusOr<char32_t> c = hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
        if (!c.ok()) return c.status();
        AppendUtf8(*c, out);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          int v = e - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            v = v * 8 + (body[++i] - '0');
          }
          AppendUtf8(static_cast<char32_t>(v), out);
        } else if (e == 'N') {
          return SyntaxError(line, "\\N{…} escapes in string literals are not supported");
        } else {
          out.push_back('\\');  // unknown escapes stay as written, as in Python
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const size_t tag = FindTagStart(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      const int text_line = line_;
      line_ += CountNewlines(text);
      if (tag == src_.size()) {
        EmitText(std::move(text), text_line);
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        text = PyStrip(text, std::nullopt, false, true);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: a block or comment tag alone at the start of its line takes the
        // indentation before it.
        const size_t newline = text.rfind('\n');
        const size_t l_pos = newline == std::string::npos ? 0 : newline + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            WhitespaceRun(text, l_pos) == text.size() - l_pos) {
          text.resize(l_pos);
        }
      }
      EmitText(std::move(text), text_line);
      pos_ = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      absl::Status status = kind == '#' ? SkipComment() : LexTag(kind);
      if (!status.ok()) return status;
      line_starting = last_end_newline_;
    }
    tokens_.push_back(Token{TokenType::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    size_t p = from;
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
        return p;
      }
      ++p;
    }
    return src_.size();
  }

  void EmitText(std::string text, int line) {
    if (!text.empty()) tokens_.push_back(Token{TokenType::kText, std::move(text), line});
  }

  // Consumes an end tag at pos_ ("%}" or "}}"), with its whitespace control; true if found.
  bool ConsumeEnd(char kind) {
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t start = pos_;
    if (src_.compare(pos_, 1, "-") == 0 && src_.compare(pos_ + 1, 2, close) == 0) {
      pos_ += 3;
      pos_ += WhitespaceRun(src_, pos_);
    } else if (kind != '{' && src_.compare(pos_, 1, "+") == 0 &&
               src_.compare(pos_ + 1, 2, close) == 0) {
      pos_ += 3;
    } else if (src_.compare(pos_, 2, close) == 0) {
      pos_ += 2;
      if (kind != '{' && pos_ < src_.size() && src_[pos_] == '\n') ++pos_;  // trim_blocks
    } else {
      return false;
    }
    const std::string_view consumed(src_.data() + start, pos_ - start);
    line_ += CountNewlines(consumed);
    last_end_newline_ = consumed.back() == '\n';
    return true;
  }

  absl::Status SkipComment() {
    const int start_line = line_;
    while (pos_ < src_.size()) {
      if (ConsumeEnd('#')) return absl::OkStatus();
      if (src_[pos_] == '\n') ++line_;
      ++pos_;
    }
    return SyntaxError(start_line, "comment is never closed with #}");
  }

  absl::Status LexTag(char kind) {
    const int start_line = line_;
    tokens_.push_back(
        Token{kind == '{' ? TokenType::kVariableBegin : TokenType::kBlockBegin, "", line_});
    std::vector<char> brackets;
    while (true) {
      const size_t ws = WhitespaceRun(src_, pos_);
      line_ += CountNewlines(std::string_view(src_).substr(pos_, ws));
      pos_ += ws;
      if (pos_ >= src_.size()) {
        return SyntaxError(start_line, kind == '{' ? "'{{' is never closed with '}}'"
                                                   : "'{%' is never closed with '%}'");
      }
      const int token_line = line_;
      if (brackets.empty() && ConsumeEnd(kind)) {
        tokens_.push_back(
            Token{kind == '{' ? TokenType::kVariableEnd : TokenType::kBlockEnd, "", token_line});
        return absl::OkStatus();
      }
      const char c = src_[pos_];
      if (IsDigit(c)) {
        if (absl::Status s = LexNumber(); !s.ok()) return s;
      } else if (IsNameStart(c)) {
        const size_t b = pos_;
        while (pos_ < src_.size() && IsNameChar(src_[pos_])) ++pos_;
        tokens_.push_back(Token{TokenType::kName, src_.substr(b, pos_ - b), line_});
      } else if (c == '\'' || c == '"') {
        if (absl::Status s = LexString(c); !s.ok()) return s;
      } else {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (std::string_view two : kTwo) {
          if (src_.compare(pos_, 2, two) == 0) op = std::string(two);
        }
        if (op.empty()) {
          static constexpr std::string_view kOne = "+-*/%~<>=.,:|()[]{}";
          if (kOne.find(c) == std::string_view::npos) {
            return SyntaxError(line_, StrCat("unexpected character '", std::string(1, c), "'"));
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") {
          brackets.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (brackets.empty() || brackets.back() != op[0]) {
            return SyntaxError(line_, StrCat("unexpected '", op, "'"));
          }
          brackets.pop_back();
        }
        pos_ += op.size();
        tokens_.push_back(Token{TokenType::kOperator, op, line_});
      }
    }
  }

  absl::Status LexNumber() {
    const size_t b = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() && (IsDigit(src_[pos_]) || src_[pos_] == '_')) ++pos_;
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && IsDigit(src_[pos_ + 1])) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && IsDigit(src_[p])) {
        is_float = true;
        pos_ = p;
        digits();
      }
    }
    std::string text = src_.substr(b, pos_ - b);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Token t{is_float ? TokenType::kFloat : TokenType::kInteger, text, line_};
    if (is_float) {
      t.number = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.integer = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) return SyntaxError(line_, StrCat("integer ", text, " exceeds 64 bits"));
    }
    tokens_.push_back(std::move(t));
    return absl::OkStatus();
  }

  absl::Status LexString(char quote) {
    const int start_line = line_;
    size_t p = pos_ + 1;
    while (p < src_.size() && src_[p] != quote) {
      if (src_[p] == '\\') ++p;
      ++p;
    }
    if (p >= src_.size()) return SyntaxError(start_line, "string literal is never closed");
    const std::string_view body(src_.data() + pos_ + 1, p - pos_ - 1);
    line_ += CountNewlines(body);
    pos_ = p + 1;
    absl::StatusOr<std::string> value = DecodeStringLiteral(body, start_line);
    if (!value.ok()) return value.status();
    tokens_.push_back(Token{TokenType::kString, std::move(*value), start_line});
    return absl::OkStatus();
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool last_end_newline_ = false;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source) {
  std::string normalized = NormalizeNewlines(source);
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(std::move(normalized)).Run();
}

}  // namespace flywheel::jinja
