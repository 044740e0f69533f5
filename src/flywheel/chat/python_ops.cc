#include "flywheel/chat/python_ops.h"

#include <cmath>

#include "absl/status/status.h"
#include "flywheel/core/strings.h"

namespace flywheel::jinja {
namespace {

absl::Status Unsupported(std::string_view op, const Value& a, const Value& b) {
  return absl::InvalidArgumentError(StrCat("unsupported operand type(s) for ", op, ": '",
                                           a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::Status UndefinedOperand(const Value& v) {
  return absl::InvalidArgumentError(v.undefined_hint().empty() ? "undefined value in arithmetic"
                                                               : v.undefined_hint());
}

absl::Status Overflow(std::string_view op) {
  return absl::OutOfRangeError(
      StrCat("integer overflow in ", op, " (Python's integers are unbounded, flywheel's 64-bit)"));
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::String(std::move(out));
  }
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return Value::List(std::move(out), seq.is_tuple());
}

// Python's float floor division and modulo (the result of % has the divisor's sign).
double FloorMod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedOperand(a);
  if (b.is_undefined()) return UndefinedOperand(b);
  if (a.is_number() && b.is_number()) {
    const bool as_float = a.is_float() || b.is_float() || op == "/";
    if (as_float) {
      const double x = a.as_float();
      const double y = b.as_float();
      if (op == "+") return Value::Float(x + y);
      if (op == "-") return Value::Float(x - y);
      if (op == "*") return Value::Float(x * y);
      if (op == "**") return Value::Float(std::pow(x, y));
      if (y == 0) return absl::InvalidArgumentError("float division by zero");
      if (op == "/") return Value::Float(x / y);
      if (op == "//") return Value::Float(std::floor((x - FloorMod(x, y)) / y + 0.5));
      if (op == "%") return Value::Float(FloorMod(x, y));
    } else {
      const int64_t x = a.as_int();
      const int64_t y = b.as_int();
      int64_t r = 0;
      if (op == "+") {
        if (__builtin_add_overflow(x, y, &r)) return Overflow(op);
        return Value::Int(r);
      }
      if (op == "-") {
        if (__builtin_sub_overflow(x, y, &r)) return Overflow(op);
        return Value::Int(r);
      }
      if (op == "*") {
        if (__builtin_mul_overflow(x, y, &r)) return Overflow(op);
        return Value::Int(r);
      }
      if (op == "**") {
        if (y < 0) return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
        int64_t result = 1;
        for (int64_t i = 0; i < y; ++i) {
          if (__builtin_mul_overflow(result, x, &result)) return Overflow(op);
          if (result == 0 || result == 1) break;
        }
        return Value::Int(result);
      }
      if (y == 0) return absl::InvalidArgumentError("integer division or modulo by zero");
      if (op == "//" || op == "%") {
        if (x == INT64_MIN && y == -1) return Overflow(op);
        int64_t q = x / y;
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return Value::Int(op == "//" ? q : m);
      }
    }
    return absl::InvalidArgumentError(StrCat("unknown operator ", op));
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::String(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      ValueList out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value::List(std::move(out), a.is_tuple());
    }
    if (a.is_string()) {
      return absl::InvalidArgumentError(
          StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
    }
    return Unsupported(op, a, b);
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return Repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return Repeat(b, a.as_int());
  }
  if (op == "%" && a.is_string()) {
    return absl::UnimplementedError("printf-style string formatting ('…' % value)");
  }
  return Unsupported(op, a, b);
}

absl::StatusOr<Value> UnaryOp(std::string_view op, const Value& a) {
  if (a.is_undefined()) return UndefinedOperand(a);
  if (!a.is_number()) {
    return absl::InvalidArgumentError(
        StrCat("bad operand type for unary ", op, ": '", a.TypeName(), "'"));
  }
  if (op == "+") return a.is_float() ? a : Value::Int(a.as_int());
  if (a.is_float()) return Value::Float(-a.as_float());
  if (a.as_int() == INT64_MIN) return Overflow("unary -");
  return Value::Int(-a.as_int());
}

}  // namespace flywheel::jinja
