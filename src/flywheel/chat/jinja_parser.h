// Parses tokens into a syntax tree, with Jinja2's grammar and operator precedence:
//
//   a if c else b  <  or  <  and  <  not  <  == != < <= > >= in, not in  <  + -  <  ~
//   <  * / // %  <  **  <  unary - +  <  primary with .attr [sub] (call), then | filter, is test
//
// Statements: if/elif/else, for (with `else`, an `if` filter, tuple targets), set (name, tuple,
// namespace attribute, block), macro, break, continue, generation (transformers' marker, rendered
// as its body). Anything else ({% include %}, {% call %}, {% filter %}, {% raw %}, …) and every
// unknown filter or test is an Unimplemented error naming the construct and its line, so a
// template the renderer cannot follow is refused when it is loaded, not rendered wrongly.
#ifndef FLYWHEEL_CHAT_JINJA_PARSER_H_
#define FLYWHEEL_CHAT_JINJA_PARSER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/chat/jinja_ast.h"
#include "flywheel/chat/jinja_lexer.h"

namespace flywheel::jinja {

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens);

}  // namespace flywheel::jinja

#endif  // FLYWHEEL_CHAT_JINJA_PARSER_H_
