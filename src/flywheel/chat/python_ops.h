// Python's arithmetic on template values: + - * / // % ** and unary - +, with Python's rules
// (True + 1 == 2, 7 // -2 == -4, -7 % 3 == 2, 1 / 2 == 0.5, 'ab' * 2, [1] + [2]). Integers are
// 64-bit: an overflow is an error instead of Python's big integer. `'%s' % x` formatting is
// refused.
#ifndef FLYWHEEL_CHAT_PYTHON_OPS_H_
#define FLYWHEEL_CHAT_PYTHON_OPS_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "flywheel/chat/jinja_value.h"

namespace flywheel::jinja {

absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b);
absl::StatusOr<Value> UnaryOp(std::string_view op, const Value& a);

}  // namespace flywheel::jinja

#endif  // FLYWHEEL_CHAT_PYTHON_OPS_H_
