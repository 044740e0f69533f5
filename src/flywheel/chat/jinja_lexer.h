// Splits a Jinja template into tokens: text between tags, and the names, literals and operators
// inside `{{ … }}` and `{% … %}`. Whitespace control is resolved here, with the settings
// transformers renders chat templates with:
//
//   trim_blocks=True      the first newline after a block or comment tag is dropped
//   lstrip_blocks=True    spaces and tabs before a block or comment tag that starts its line are
//                         dropped ({%+ keeps them)
//   {%- / {{- / {#-       all whitespace before the tag is dropped (newlines included)
//   -%} / -}} / -#}       all whitespace after the tag is dropped; +%} keeps the newline
//
// Newlines are normalised to "\n" and one trailing newline of the template is dropped
// (keep_trailing_newline=False), as Jinja2's lexer does.
#ifndef FLYWHEEL_CHAT_JINJA_LEXER_H_
#define FLYWHEEL_CHAT_JINJA_LEXER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel::jinja {

enum class TokenType {
  kText,           // template text, whitespace control applied
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,           // identifiers and keywords (if, for, in, not, …)
  kString,         // a string literal, escapes decoded
  kInteger,
  kFloat,
  kOperator,  // + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { }
  kEnd,       // end of the template
};

struct Token {
  TokenType type;
  std::string value;  // text, name, decoded string or operator
  int line = 1;       // 1-based line of the template where the token starts
  int64_t integer = 0;
  double number = 0;
};

// Syntax errors name the line: "line 3: unterminated string literal".
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace flywheel::jinja

#endif  // FLYWHEEL_CHAT_JINJA_LEXER_H_
