#include "flywheel/chat/jinja_value.h"

#include <charconv>
#include <cmath>

#include "flywheel/chat/python_string.h"
#include "flywheel/core/strings.h"

namespace flywheel::jinja {

Value Value::Undefined(std::string hint) {
  Value v;
  v.string_ = std::move(hint);
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.bool_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = i;
  return v;
}

Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.float_ = f;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.string_ = std::move(s);
  return v;
}

Value Value::List(ValueList items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.is_tuple_ = is_tuple;
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}

Value Value::Dict(ValueDict items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<const ValueDict>(std::move(items));
  return v;
}

Value Value::MakeNamespace(ValueDict attributes) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.namespace_ = std::make_shared<Namespace>(Namespace{std::move(attributes)});
  return v;
}

Value Value::Function(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.callable_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Int(static_cast<int64_t>(u));
      return Float(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict items;
      items.reserve(json.size());
      for (const auto& [key, item] : json.items()) items.emplace_back(key, FromJson(item));
      return Dict(std::move(items));
    }
    default:  // binary, discarded: not produced by parsing JSON text
      return None();
  }
}

const Value* Value::Find(std::string_view key) const {
  const ValueDict* items = nullptr;
  if (is_dict()) items = dict_.get();
  if (is_namespace()) items = &namespace_->attributes;
  if (items == nullptr) return nullptr;
  for (const auto& [k, v] : *items) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string_view Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return is_tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.as_bool();
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_float() != 0.0;
    case Value::Kind::kString:
      return !v.as_string().empty();
    case Value::Kind::kList:
      return !v.as_list().empty();
    case Value::Kind::kDict:
      return !v.as_dict().empty();
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:
      return true;
  }
  return false;
}

bool Equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      // Python: a list never equals a tuple.
      if (a.is_tuple() != b.is_tuple()) return false;
      const ValueList& x = a.as_list();
      const ValueList& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!Equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.as_dict().size() != b.as_dict().size()) return false;
      for (const auto& [key, value] : a.as_dict()) {
        const Value* other = b.Find(key);
        if (other == nullptr || !Equals(value, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.as_namespace() == &b.as_namespace();
    case Value::Kind::kCallable:
      return &a.as_callable() == &b.as_callable();
    default:
      return false;
  }
}

absl::StatusOr<bool> LessThan(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 keeps order
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const ValueList& x = a.as_list();
    const ValueList& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return LessThan(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return absl::InvalidArgumentError(StrCat("'<' not supported between instances of '", a.TypeName(),
                                           "' and '", b.TypeName(), "'"));
}

std::string PythonFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, result.ptr - buf);  // "-1.2345e+17": shortest round-trip digits
  std::string out;
  if (!sci.empty() && sci[0] == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits.push_back(c);
  }
  int exponent = 0;
  std::from_chars(sci.data() + e_pos + 1 + (sci[e_pos + 1] == '+' ? 1 : 0), sci.data() + sci.size(),
                  exponent);
  const int decpt = exponent + 1;  // digits d1d2… stand for 0.d1d2… × 10^decpt
  const int ndigits = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= ndigits) {
      out += digits + std::string(decpt - ndigits, '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (ndigits > 1) out += "." + digits.substr(1);
  const int e = decpt - 1;
  out += fmt::format("e{}{:02d}", e < 0 ? '-' : '+', e < 0 ? -e : e);
  return out;
}

namespace {

// Code points repr() escapes beyond ASCII control characters: the C1 controls, the soft hyphen,
// Unicode spaces and separators, format characters and private use (Python's non-printables;
// unassigned code points are not tracked).
bool IsNonPrintable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return true;
  if (c >= 0x80 && c <= 0xA0) return true;
  if (c == 0xAD || c == 0x061C || c == 0x180E || c == 0xFEFF) return true;
  if (c >= 0x80 && IsPythonWhitespace(c)) return true;
  if ((c >= 0x200B && c <= 0x200F) || (c >= 0x202A && c <= 0x202E) ||
      (c >= 0x2060 && c <= 0x206F) || (c >= 0xFFF9 && c <= 0xFFFB)) {
    return true;
  }
  return (c >= 0xE000 && c <= 0xF8FF) || c >= 0xF0000;
}

std::string StringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : DecodeUtf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (IsNonPrintable(c)) {
      if (c <= 0xFF) {
        out += fmt::format("\\x{:02x}", static_cast<uint32_t>(c));
      } else if (c <= 0xFFFF) {
        out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
      } else {
        out += fmt::format("\\U{:08x}", static_cast<uint32_t>(c));
      }
    } else {
      AppendUtf8(c, out);
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace

absl::StatusOr<std::string> ToPythonRepr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString:
      return StringRepr(v.as_string());
    case Value::Kind::kList: {
      std::string out = v.is_tuple() ? "(" : "[";
      const ValueList& items = v.as_list();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += ", ";
        absl::StatusOr<std::string> item = ToPythonRepr(items[i]);
        if (!item.ok()) return item.status();
        out += *item;
      }
      if (v.is_tuple() && items.size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      return out;
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, value] : v.as_dict()) {
        if (!first) out += ", ";
        first = false;
        absl::StatusOr<std::string> item = ToPythonRepr(value);
        if (!item.ok()) return item.status();
        out += StringRepr(key) + ": " + *item;
      }
      return out + "}";
    }
    case Value::Kind::kUndefined:
      // Jinja's Undefined has no repr of its own inside containers: Python prints "Undefined".
      return std::string("Undefined");
    default:
      return ToPythonStr(v);
  }
}

absl::StatusOr<std::string> ToPythonStr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::string();
    case Value::Kind::kNone:
      return std::string("None");
    case Value::Kind::kBool:
      return std::string(v.as_bool() ? "True" : "False");
    case Value::Kind::kInt:
      return std::to_string(v.as_int());
    case Value::Kind::kFloat:
      return PythonFloatRepr(v.as_float());
    case Value::Kind::kString:
      return v.as_string();
    case Value::Kind::kList:
    case Value::Kind::kDict:
      return ToPythonRepr(v);
    case Value::Kind::kNamespace:
      return absl::UnimplementedError(
          "printing a namespace object (Python prints its address, which no renderer can match)");
    case Value::Kind::kCallable:
      return absl::UnimplementedError(
          StrCat("printing the function '", v.as_callable().name,
                 "' (Python prints its address, which no renderer can match); call it instead"));
  }
  return std::string();
}

}  // namespace flywheel::jinja
