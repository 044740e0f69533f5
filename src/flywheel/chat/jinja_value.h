// The values a chat template computes with, with the semantics of Python as Jinja2 exposes them:
// truthiness, ==, <, str(), repr(), + and friends. Templates are written against Python's
// behaviour (`{{ none }}` prints "None", `[1, 2] == [1, 2]`, `'a' + 1` is an error), so a
// renderer that must match Hugging Face's byte for byte needs the same rules, not JSON's.
//
//   Value ── undefined ("'x' is undefined": Jinja's Undefined, prints as "", iterates as empty)
//         ├─ none / bool / int (int64) / float (double) / string (UTF-8, indexed by code point)
//         ├─ list ── shared, immutable std::vector<Value>  (a tuple is a list marked is_tuple)
//         ├─ dict ── shared, immutable, insertion-ordered string keys (Python dicts keep order)
//         ├─ namespace ── shared and mutable: `{% set ns.x = … %}` inside a loop is seen outside
//         └─ callable ── built-in functions, bound methods ('abc'.upper), macros
//
// Copying a Value is cheap (containers are shared_ptr); the interpreter never mutates a list or
// dict in place (transformers renders in an ImmutableSandboxedEnvironment, which refuses that).
#ifndef FLYWHEEL_CHAT_JINJA_VALUE_H_
#define FLYWHEEL_CHAT_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace flywheel::jinja {

class Value;
using ValueList = std::vector<Value>;
// Insertion-ordered; lookups are linear (message dicts have a handful of keys).
using ValueDict = std::vector<std::pair<std::string, Value>>;

// Arguments of a call: `f(1, x=2)`.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFunction = std::function<absl::StatusOr<Value>(CallArgs args)>;

struct Callable {
  std::string name;  // for messages: "raise_exception", "str.startswith", "macro tool_line"
  NativeFunction call;
};

// `namespace(a=1)`: the one mutable object a template can make.
struct Namespace {
  ValueDict attributes;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  Value() = default;  // undefined
  static Value Undefined(std::string hint = "");
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value List(ValueList items, bool is_tuple = false);
  static Value Dict(ValueDict items);
  static Value MakeNamespace(ValueDict attributes);
  static Value Function(std::string name, NativeFunction fn);

  // JSON → Value (objects keep their key order when given an ordered_json). Numbers that do
  // not fit int64 become floats, as nlohmann parses them.
  static Value FromJson(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // Python's numbers include bool (True + 1 == 2).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && is_tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return is_bool() ? (bool_ ? 1 : 0) : int_; }
  double as_float() const { return is_float() ? float_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return string_; }
  const ValueList& as_list() const { return *list_; }
  const ValueDict& as_dict() const { return *dict_; }
  Namespace& as_namespace() const { return *namespace_; }
  const Callable& as_callable() const { return *callable_; }
  // Why an undefined value is undefined, in Jinja's words ("'dict object' has no attribute 'x'").
  const std::string& undefined_hint() const { return string_; }

  // The value of `key` in a dict or namespace; nullptr when absent.
  const Value* Find(std::string_view key) const;

  // Python's type name for messages: "str", "int", "dict", "list", "NoneType", "undefined".
  std::string_view TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool bool_ = false;
  bool is_tuple_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::string string_;  // string value, or the undefined hint
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<const ValueDict> dict_;
  std::shared_ptr<Namespace> namespace_;
  std::shared_ptr<const Callable> callable_;
};

// Python's bool(x) (Jinja's Undefined is false).
bool Truthy(const Value& v);

// Python's ==: numbers by value across int/float/bool, lists element-wise, dicts regardless of
// order; Jinja's Undefined equals only Undefined.
bool Equals(const Value& a, const Value& b);

// Python's <: numbers, strings (code point order), lists lexicographically. Other pairs are the
// TypeError Python raises.
absl::StatusOr<bool> LessThan(const Value& a, const Value& b);

// Python's str(x) as Jinja prints it: undefined is "", None is "None", lists and dicts as repr.
// Callables and namespaces print an address in Python, so they are an error here.
absl::StatusOr<std::string> ToPythonStr(const Value& v);

// Python's repr(x): strings quoted ('it\'s' is "it's"), lists [..], dicts {'k': v}, tuples (..).
absl::StatusOr<std::string> ToPythonRepr(const Value& v);

// Python's repr(float): shortest round-trip digits, fixed notation for exponents in (-4, 16],
// otherwise "1e+16" style; "inf", "nan".
std::string PythonFloatRepr(double d);

}  // namespace flywheel::jinja

#endif  // FLYWHEEL_CHAT_JINJA_VALUE_H_
