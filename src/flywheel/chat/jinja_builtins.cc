#include "flywheel/chat/jinja_builtins.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <set>

#include "absl/status/status.h"
#include "flywheel/chat/python_json.h"
#include "flywheel/chat/python_string.h"
#include "flywheel/core/strings.h"

namespace flywheel::jinja {
namespace {

using Bound = std::vector<std::optional<Value>>;

// Binds a call's arguments to parameter names (Python's rules without *args): positional first,
// then keywords; an unknown keyword or too many positionals is the TypeError Python raises.
absl::StatusOr<Bound> Bind(std::string_view function, const CallArgs& args,
                           std::initializer_list<std::string_view> names) {
  Bound bound(names.size());
  if (args.positional.size() > names.size()) {
    return absl::InvalidArgumentError(StrCat(function, "() takes at most ", names.size(),
                                             " arguments (", args.positional.size(), " given)"));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    size_t i = 0;
    for (std::string_view n : names) {
      if (n == key) break;
      ++i;
    }
    if (i == names.size()) {
      return absl::InvalidArgumentError(
          StrCat(function, "() got an unexpected keyword argument '", key, "'"));
    }
    if (bound[i].has_value()) {
      return absl::InvalidArgumentError(
          StrCat(function, "() got multiple values for argument '", key, "'"));
    }
    bound[i] = value;
  }
  return bound;
}

absl::Status TypeError(std::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

// Python's argument conversions for the few types a builtin wants.
absl::StatusOr<std::string> StringArg(std::string_view function, const std::optional<Value>& v,
                                      std::string dflt) {
  if (!v.has_value() || v->is_undefined()) return dflt;
  if (!v->is_string()) {
    return TypeError(StrCat(function, "(): expected a string argument, got ", v->TypeName()));
  }
  return v->as_string();
}

absl::StatusOr<std::optional<std::string>> OptionalStringArg(std::string_view function,
                                                             const std::optional<Value>& v) {
  if (!v.has_value() || v->is_none() || v->is_undefined()) return std::optional<std::string>();
  if (!v->is_string()) {
    return TypeError(StrCat(function, "(): expected a string or None, got ", v->TypeName()));
  }
  return std::optional<std::string>(v->as_string());
}

absl::StatusOr<int64_t> IntArg(std::string_view function, const std::optional<Value>& v,
                               int64_t dflt) {
  if (!v.has_value() || v->is_none()) return dflt;
  if (!v->is_int() && !v->is_bool()) {
    return TypeError(StrCat(function, "(): expected an integer argument, got ", v->TypeName()));
  }
  return v->as_int();
}

bool BoolArg(const std::optional<Value>& v, bool dflt) { return v.has_value() ? Truthy(*v) : dflt; }

Value StringList(const std::vector<std::string>& parts) {
  ValueList items;
  for (const std::string& p : parts) items.push_back(Value::String(p));
  return Value::List(std::move(items));
}

absl::StatusOr<Value> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Value::Int(0);
    case Value::Kind::kString:
      return Value::Int(CodePointLength(v.as_string()));
    case Value::Kind::kList:
      return Value::Int(static_cast<int64_t>(v.as_list().size()));
    case Value::Kind::kDict:
      return Value::Int(static_cast<int64_t>(v.as_dict().size()));
    default:
      return TypeError(StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
}

// ---- str methods ----

absl::StatusOr<Value> StrMethod(const std::string& self, std::string_view method,
                                const CallArgs& args) {
  const std::string fn = StrCat("str.", method);
  if (method == "startswith" || method == "endswith") {
    absl::StatusOr<Bound> b = Bind(fn, args, {"prefix", "start", "end"});
    if (!b.ok()) return b.status();
    if (!(*b)[0].has_value()) return TypeError(StrCat(fn, "() takes at least 1 argument"));
    if ((*b)[1].has_value() || (*b)[2].has_value()) {
      return absl::UnimplementedError(StrCat(fn, "() with start or end"));
    }
    std::vector<std::string> candidates;
    const Value& arg = *(*b)[0];
    if (arg.is_string()) {
      candidates.push_back(arg.as_string());
    } else if (arg.is_list() && arg.is_tuple()) {
      for (const Value& item : arg.as_list()) {
        if (!item.is_string()) return TypeError(StrCat(fn, "(): tuple items must be str"));
        candidates.push_back(item.as_string());
      }
    } else {
      return TypeError(
          StrCat(fn, " first arg must be str or a tuple of str, not ", arg.TypeName()));
    }
    for (const std::string& c : candidates) {
      const bool hit =
          method == "startswith"
              ? self.compare(0, c.size(), c) == 0 && self.size() >= c.size()
              : self.size() >= c.size() && self.compare(self.size() - c.size(), c.size(), c) == 0;
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (method == "strip" || method == "lstrip" || method == "rstrip") {
    absl::StatusOr<Bound> b = Bind(fn, args, {"chars"});
    if (!b.ok()) return b.status();
    absl::StatusOr<std::optional<std::string>> chars = OptionalStringArg(fn, (*b)[0]);
    if (!chars.ok()) return chars.status();
    return Value::String(PyStrip(self, *chars, method != "rstrip", method != "lstrip"));
  }
  if (method == "split" || method == "rsplit") {
    absl::StatusOr<Bound> b = Bind(fn, args, {"sep", "maxsplit"});
    if (!b.ok()) return b.status();
    absl::StatusOr<std::optional<std::string>> sep = OptionalStringArg(fn, (*b)[0]);
    if (!sep.ok()) return sep.status();
    absl::StatusOr<int64_t> maxsplit = IntArg(fn, (*b)[1], -1);
    if (!maxsplit.ok()) return maxsplit.status();
    absl::StatusOr<std::vector<std::string>> parts =
        PySplit(self, *sep, *maxsplit, method == "rsplit");
    if (!parts.ok()) return parts.status();
    return StringList(*parts);
  }
  if (method == "replace") {
    absl::StatusOr<Bound> b = Bind(fn, args, {"old", "new", "count"});
    if (!b.ok()) return b.status();
    if (!(*b)[0].has_value() || !(*b)[1].has_value()) {
      return TypeError(StrCat(fn, "() takes at least 2 arguments"));
    }
    absl::StatusOr<std::string> old_text = StringArg(fn, (*b)[0], "");
    absl::StatusOr<std::string> new_text = StringArg(fn, (*b)[1], "");
    absl::StatusOr<int64_t> count = IntArg(fn, (*b)[2], -1);
    if (!old_text.ok()) return old_text.status();
    if (!new_text.ok()) return new_text.status();
    if (!count.ok()) return count.status();
    return Value::String(PyReplace(self, *old_text, *new_text, *count));
  }
  if (method == "upper" || method == "lower" || method == "title" || method == "capitalize") {
    if (!args.positional.empty() || !args.keyword.empty()) {
      return TypeError(StrCat(fn, "() takes no arguments"));
    }
    absl::StatusOr<std::string> r = method == "upper"   ? PyUpper(self)
                                    : method == "lower" ? PyLower(self)
                                    : method == "title" ? PyTitle(self)
                                                        : PyCapitalize(self);
    if (!r.ok()) return r.status();
    return Value::String(*r);
  }
  if (method == "find" || method == "count") {
    absl::StatusOr<Bound> b = Bind(fn, args, {"sub"});
    if (!b.ok()) return b.status();
    absl::StatusOr<std::string> sub = StringArg(fn, (*b)[0], "");
    if (!sub.ok()) return sub.status();
    if (method == "find") {
      const size_t at = self.find(*sub);
      if (at == std::string::npos) return Value::Int(-1);
      return Value::Int(CodePointLength(std::string_view(self).substr(0, at)));
    }
    if (sub->empty()) return Value::Int(CodePointLength(self) + 1);
    int64_t n = 0;
    for (size_t p = self.find(*sub); p != std::string::npos; p = self.find(*sub, p + sub->size())) {
      ++n;
    }
    return Value::Int(n);
  }
  if (method == "join") {
    absl::StatusOr<Bound> b = Bind(fn, args, {"iterable"});
    if (!b.ok()) return b.status();
    if (!(*b)[0].has_value()) return TypeError("str.join() takes exactly one argument");
    absl::StatusOr<ValueList> items = Iterate(*(*b)[0]);
    if (!items.ok()) return items.status();
    std::string out;
    for (size_t i = 0; i < items->size(); ++i) {
      if (!(*items)[i].is_string()) {
        return TypeError(StrCat("sequence item ", i, ": expected str instance, ",
                                (*items)[i].TypeName(), " found"));
      }
      if (i > 0) out += self;
      out += (*items)[i].as_string();
    }
    return Value::String(std::move(out));
  }
  return absl::UnimplementedError(StrCat("the method ", fn, "()"));
}

bool IsStrMethod(std::string_view name) {
  static const std::set<std::string, std::less<>> kAll = {
      "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
      "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
      "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
      "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
      "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
      "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
      "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
      "swapcase",     "title",       "translate", "upper",      "zfill"};
  return kAll.count(name) > 0;
}

bool IsDictMethod(std::string_view name) {
  static const std::set<std::string, std::less<>> kAll = {
      "clear", "copy",    "fromkeys",   "get",    "items", "keys",
      "pop",   "popitem", "setdefault", "update", "values"};
  return kAll.count(name) > 0;
}

bool IsListMethod(std::string_view name) {
  static const std::set<std::string, std::less<>> kAll = {"append", "clear",   "copy",   "count",
                                                          "extend", "index",   "insert", "pop",
                                                          "remove", "reverse", "sort"};
  return kAll.count(name) > 0;
}

Value ItemsOf(const Value& dict) {
  ValueList items;
  for (const auto& [k, v] : dict.as_dict()) {
    items.push_back(Value::List({Value::String(k), v}, /*is_tuple=*/true));
  }
  return Value::List(std::move(items));
}

absl::StatusOr<Value> DictMethod(const Value& self, std::string_view method, const CallArgs& args) {
  const std::string fn = StrCat("dict.", method);
  if (method == "items" || method == "keys" || method == "values") {
    if (!args.positional.empty() || !args.keyword.empty()) {
      return TypeError(StrCat(fn, "() takes no arguments"));
    }
    if (method == "items") return ItemsOf(self);
    ValueList out;
    for (const auto& [k, v] : self.as_dict())
      out.push_back(method == "keys" ? Value::String(k) : v);
    return Value::List(std::move(out));
  }
  if (method == "get") {
    if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 2) {
      return TypeError("dict.get() takes 1 or 2 positional arguments");
    }
    if (args.positional[0].is_string()) {
      if (const Value* v = self.Find(args.positional[0].as_string())) return *v;
    }
    return args.positional.size() == 2 ? args.positional[1] : Value::None();
  }
  return absl::UnimplementedError(
      StrCat("the method ", fn, "() (transformers renders in an immutable sandbox)"));
}

Value BoundMethod(const Value& self, std::string type, std::string method) {
  const std::string name = StrCat(type, ".", method);
  return Value::Function(name, [self, type, method](CallArgs args) -> absl::StatusOr<Value> {
    if (type == "str") return StrMethod(self.as_string(), method, args);
    if (type == "dict") return DictMethod(self, method, args);
    return absl::UnimplementedError(StrCat("the method ", type, ".", method,
                                           "() (transformers renders in an immutable sandbox)"));
  });
}

std::string JinjaTypeName(const Value& v) {
  if (v.is_none()) return "None";
  return StrCat(v.TypeName(), " object");
}

// ---- filters ----

absl::StatusOr<Value> FilterToJson(const Value& input, const CallArgs& args) {
  absl::StatusOr<Bound> b =
      Bind("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  if (!b.ok()) return b.status();
  JsonDumpsOptions options;
  options.ensure_ascii = BoolArg((*b)[0], false);
  if ((*b)[1].has_value() && !(*b)[1]->is_none()) {
    const Value& indent = *(*b)[1];
    if (indent.is_string()) {
      options.indent = indent.as_string();
    } else if (indent.is_int()) {
      options.indent = std::string(std::max<int64_t>(0, indent.as_int()), ' ');
    } else {
      return TypeError(
          StrCat("tojson(): indent must be an int or a string, got ", indent.TypeName()));
    }
  }
  if ((*b)[2].has_value() && !(*b)[2]->is_none()) {
    const Value& sep = *(*b)[2];
    if (!sep.is_list() || sep.as_list().size() != 2 || !sep.as_list()[0].is_string() ||
        !sep.as_list()[1].is_string()) {
      return TypeError("tojson(): separators must be a pair of strings");
    }
    options.item_separator = sep.as_list()[0].as_string();
    options.key_separator = sep.as_list()[1].as_string();
  }
  options.sort_keys = BoolArg((*b)[3], false);
  absl::StatusOr<std::string> text = PythonJsonDumps(input, options);
  if (!text.ok()) return text.status();
  return Value::String(std::move(*text));
}

// Jinja's indent filter (splitlines on Python's line boundaries).
absl::StatusOr<Value> FilterIndent(const Value& input, const CallArgs& args) {
  absl::StatusOr<Bound> b = Bind("indent", args, {"width", "first", "blank"});
  if (!b.ok()) return b.status();
  std::string indention;
  if ((*b)[0].has_value() && (*b)[0]->is_string()) {
    indention = (*b)[0]->as_string();
  } else {
    absl::StatusOr<int64_t> width = IntArg("indent", (*b)[0], 4);
    if (!width.ok()) return width.status();
    indention = std::string(std::max<int64_t>(0, *width), ' ');
  }
  const bool first = BoolArg((*b)[1], false);
  const bool blank = BoolArg((*b)[2], false);
  absl::StatusOr<std::string> s = ToPythonStr(input);
  if (!s.ok()) return s.status();
  const std::u32string text = DecodeUtf8(*s + "\n");
  std::vector<std::string> lines;
  std::u32string current;
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    const bool boundary = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C ||
                          c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) {
      current.push_back(c);
      continue;
    }
    if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
    lines.push_back(EncodeUtf8(current));
    current.clear();
  }
  if (!current.empty()) lines.push_back(EncodeUtf8(current));
  std::string out;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + indention;
      out += lines[i];
    }
  } else if (!lines.empty()) {
    out = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
    }
  }
  if (first) out = indention + out;
  return Value::String(std::move(out));
}

absl::StatusOr<Value> FilterInt(const Value& input, const CallArgs& args) {
  absl::StatusOr<Bound> b = Bind("int", args, {"default", "base"});
  if (!b.ok()) return b.status();
  const Value dflt = (*b)[0].value_or(Value::Int(0));
  if ((*b)[1].has_value() && !Equals(Value::Int(10), *(*b)[1])) {
    return absl::UnimplementedError("int(base=…) other than 10");
  }
  if (input.is_int() || input.is_bool()) return Value::Int(input.as_int());
  if (input.is_float()) {
    if (!std::isfinite(input.as_float())) return dflt;
    return Value::Int(static_cast<int64_t>(std::trunc(input.as_float())));
  }
  if (input.is_string()) {
    const std::string s = PyStrip(input.as_string(), std::nullopt, true, true);
    std::string digits;
    for (char c : s) {
      if (c != '_') digits.push_back(c);
    }
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(digits.c_str(), &end, 10);
    if (!digits.empty() && end == digits.c_str() + digits.size() && errno == 0)
      return Value::Int(v);
    // Jinja falls back to int(float(s)).
    const double d = std::strtod(digits.c_str(), &end);
    if (!digits.empty() && end == digits.c_str() + digits.size() && std::isfinite(d)) {
      return Value::Int(static_cast<int64_t>(std::trunc(d)));
    }
  }
  return dflt;
}

absl::StatusOr<Value> FilterFloat(const Value& input, const CallArgs& args) {
  absl::StatusOr<Bound> b = Bind("float", args, {"default"});
  if (!b.ok()) return b.status();
  const Value dflt = (*b)[0].value_or(Value::Float(0.0));
  if (input.is_number()) return Value::Float(input.as_float());
  if (input.is_string()) {
    const std::string s = PyStrip(input.as_string(), std::nullopt, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value::Float(d);
  }
  return dflt;
}

// Jinja's title filter: words start after whitespace, '-', and opening brackets.
absl::StatusOr<Value> FilterTitle(const Value& input) {
  absl::StatusOr<std::string> s = ToPythonStr(input);
  if (!s.ok()) return s.status();
  std::u32string text = DecodeUtf8(*s);
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    auto is_sep = [](char32_t c) {
      return IsPythonWhitespace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    };
    if (is_sep(text[i])) {
      while (j < text.size() && is_sep(text[j])) ++j;
      out += EncodeUtf8(std::u32string_view(text).substr(i, j - i));
    } else {
      while (j < text.size() && !is_sep(text[j])) ++j;
      const std::string word = EncodeUtf8(std::u32string_view(text).substr(i, j - i));
      const std::u32string cps = DecodeUtf8(word);
      absl::StatusOr<std::string> head = PyUpper(EncodeUtf8(std::u32string_view(cps).substr(0, 1)));
      absl::StatusOr<std::string> tail = PyLower(EncodeUtf8(std::u32string_view(cps).substr(1)));
      if (!head.ok()) return head.status();
      if (!tail.ok()) return tail.status();
      out += *head + *tail;
    }
    i = j;
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Attribute(const Value& item, const std::string& path) {
  // "a.b" walks attributes; digits index lists (Jinja's make_attrgetter).
  Value current = item;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    absl::StatusOr<Value> next = numeric ? GetItem(current, Value::Int(std::stoll(part)))
                                         : GetItem(current, Value::String(part));
    if (!next.ok()) return next.status();
    current = std::move(*next);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return current;
}

absl::StatusOr<Value> FilterSelectReject(std::string_view name, const Value& input,
                                         const CallArgs& args) {
  const bool by_attribute = name == "selectattr" || name == "rejectattr";
  const bool select = name == "select" || name == "selectattr";
  absl::StatusOr<ValueList> items = Iterate(input);
  if (!items.ok()) return items.status();
  if (!args.keyword.empty()) return absl::UnimplementedError(StrCat(name, "() with keywords"));
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty() || !args.positional[0].is_string()) {
      return TypeError(StrCat(name, "(): expected an attribute name"));
    }
    attribute = args.positional[next++].as_string();
  }
  std::string test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string())
      return TypeError(StrCat(name, "(): expected a test name"));
    test = args.positional[next++].as_string();
    if (!IsKnownTest(test)) return absl::UnimplementedError(StrCat("the test '", test, "'"));
  }
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + next, args.positional.end());
  ValueList out;
  for (const Value& item : *items) {
    Value subject = item;
    if (by_attribute) {
      absl::StatusOr<Value> a = Attribute(item, attribute);
      if (!a.ok()) return a.status();
      subject = *a;
    }
    bool pass = Truthy(subject);
    if (!test.empty()) {
      absl::StatusOr<bool> t = ApplyTest(test, subject, test_args);
      if (!t.ok()) return t.status();
      pass = *t;
    }
    if (pass == select) out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> FilterMap(const Value& input, const CallArgs& args) {
  absl::StatusOr<ValueList> items = Iterate(input);
  if (!items.ok()) return items.status();
  ValueList out;
  if (args.positional.empty()) {
    std::optional<Value> attribute, dflt;
    for (const auto& [k, v] : args.keyword) {
      if (k == "attribute") {
        attribute = v;
      } else if (k == "default") {
        dflt = v;
      } else {
        return TypeError(StrCat("map(): unexpected keyword argument '", k, "'"));
      }
    }
    if (!attribute.has_value() || !attribute->is_string()) {
      return TypeError("map(): expected a filter name or attribute=");
    }
    for (const Value& item : *items) {
      absl::StatusOr<Value> a = Attribute(item, attribute->as_string());
      if (!a.ok()) return a.status();
      out.push_back(a->is_undefined() && dflt.has_value() ? *dflt : *a);
    }
    return Value::List(std::move(out));
  }
  if (!args.positional[0].is_string()) return TypeError("map(): expected a filter name");
  const std::string filter = args.positional[0].as_string();
  if (!IsKnownFilter(filter)) return absl::UnimplementedError(StrCat("the filter '", filter, "'"));
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : *items) {
    absl::StatusOr<Value> v = ApplyFilter(filter, item, rest);
    if (!v.ok()) return v.status();
    out.push_back(std::move(*v));
  }
  return Value::List(std::move(out));
}

const std::set<std::string, std::less<>>& KnownFilters() {
  static const std::set<std::string, std::less<>> kFilters = {
      "abs",    "capitalize", "count",  "d",          "default", "first",   "float",
      "indent", "int",        "items",  "join",       "last",    "length",  "list",
      "lower",  "map",        "reject", "rejectattr", "replace", "reverse", "safe",
      "select", "selectattr", "string", "title",      "tojson",  "trim",    "upper"};
  return kFilters;
}

const std::set<std::string, std::less<>>& KnownTests() {
  static const std::set<std::string, std::less<>> kTests = {
      "boolean", "callable", "defined",  "divisibleby", "eq",        "equalto", "==",
      "even",    "false",    "float",    "ge",          ">=",        "gt",      ">",
      "in",      "integer",  "iterable", "le",          "<=",        "lt",      "<",
      "lower",   "mapping",  "ne",       "!=",          "none",      "number",  "odd",
      "sameas",  "sequence", "string",   "true",        "undefined", "upper"};
  return kTests;
}

absl::Status NoArgs(std::string_view name, const CallArgs& args) {
  if (!args.positional.empty() || !args.keyword.empty()) {
    return TypeError(StrCat(name, "() takes no arguments"));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsKnownFilter(std::string_view name) { return KnownFilters().count(name) > 0; }
bool IsKnownTest(std::string_view name) { return KnownTests().count(name) > 0; }

absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& input, CallArgs args) {
  if (name == "default" || name == "d") {
    absl::StatusOr<Bound> b = Bind(name, args, {"default_value", "boolean"});
    if (!b.ok()) return b.status();
    const bool boolean = BoolArg((*b)[1], false);
    if (input.is_undefined() || (boolean && !Truthy(input))) {
      return (*b)[0].value_or(Value::String(""));
    }
    return input;
  }
  if (name == "tojson") return FilterToJson(input, args);
  if (name == "map") return FilterMap(input, args);
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    return FilterSelectReject(name, input, args);
  }
  if (name == "indent") return FilterIndent(input, args);
  if (name == "int") return FilterInt(input, args);
  if (name == "float") return FilterFloat(input, args);
  if (name == "trim") {
    absl::StatusOr<Bound> b = Bind("trim", args, {"chars"});
    if (!b.ok()) return b.status();
    absl::StatusOr<std::optional<std::string>> chars = OptionalStringArg("trim", (*b)[0]);
    if (!chars.ok()) return chars.status();
    absl::StatusOr<std::string> s = ToPythonStr(input);
    if (!s.ok()) return s.status();
    return Value::String(PyStrip(*s, *chars, true, true));
  }
  if (name == "replace") {
    absl::StatusOr<Bound> b = Bind("replace", args, {"old", "new", "count"});
    if (!b.ok()) return b.status();
    absl::StatusOr<std::string> s = ToPythonStr(input);
    absl::StatusOr<std::string> old_text = StringArg("replace", (*b)[0], "");
    absl::StatusOr<std::string> new_text = StringArg("replace", (*b)[1], "");
    absl::StatusOr<int64_t> count = IntArg("replace", (*b)[2], -1);
    if (!s.ok()) return s.status();
    if (!old_text.ok()) return old_text.status();
    if (!new_text.ok()) return new_text.status();
    if (!count.ok()) return count.status();
    return Value::String(PyReplace(*s, *old_text, *new_text, *count));
  }
  if (name == "join") {
    absl::StatusOr<Bound> b = Bind("join", args, {"d", "attribute"});
    if (!b.ok()) return b.status();
    absl::StatusOr<std::string> sep = StringArg("join", (*b)[0], "");
    if (!sep.ok()) return sep.status();
    absl::StatusOr<ValueList> items = Iterate(input);
    if (!items.ok()) return items.status();
    std::string out;
    for (size_t i = 0; i < items->size(); ++i) {
      Value item = (*items)[i];
      if ((*b)[1].has_value() && !(*b)[1]->is_none()) {
        absl::StatusOr<std::string> attr = ToPythonStr(*(*b)[1]);
        if (!attr.ok()) return attr.status();
        absl::StatusOr<Value> a = Attribute(item, *attr);
        if (!a.ok()) return a.status();
        item = *a;
      }
      absl::StatusOr<std::string> s = ToPythonStr(item);
      if (!s.ok()) return s.status();
      if (i > 0) out += *sep;
      out += *s;
    }
    return Value::String(std::move(out));
  }
  // The rest take no arguments.
  if (absl::Status s = NoArgs(name, args); !s.ok()) return s;
  if (name == "length" || name == "count") return Length(input);
  if (name == "string") {
    absl::StatusOr<std::string> s = ToPythonStr(input);
    if (!s.ok()) return s.status();
    return Value::String(std::move(*s));
  }
  if (name == "safe") return input;
  if (name == "upper" || name == "lower" || name == "capitalize") {
    absl::StatusOr<std::string> s = ToPythonStr(input);
    if (!s.ok()) return s.status();
    absl::StatusOr<std::string> r = name == "upper"   ? PyUpper(*s)
                                    : name == "lower" ? PyLower(*s)
                                                      : PyCapitalize(*s);
    if (!r.ok()) return r.status();
    return Value::String(std::move(*r));
  }
  if (name == "title") return FilterTitle(input);
  if (name == "items") {
    if (input.is_undefined()) return Value::List({});
    if (!input.is_dict()) {
      return TypeError(StrCat("items(): expected a mapping, got ", input.TypeName()));
    }
    return ItemsOf(input);
  }
  if (name == "list") {
    absl::StatusOr<ValueList> items = Iterate(input);
    if (!items.ok()) return items.status();
    return Value::List(std::move(*items));
  }
  if (name == "first" || name == "last") {
    absl::StatusOr<ValueList> items = Iterate(input);
    if (!items.ok()) return items.status();
    if (items->empty()) return Value::Undefined(StrCat("No ", name, " item, sequence was empty."));
    return name == "first" ? items->front() : items->back();
  }
  if (name == "reverse") {
    if (input.is_string()) {
      std::u32string cps = DecodeUtf8(input.as_string());
      std::reverse(cps.begin(), cps.end());
      return Value::String(EncodeUtf8(cps));
    }
    absl::StatusOr<ValueList> items = Iterate(input);
    if (!items.ok()) return items.status();
    std::reverse(items->begin(), items->end());
    return Value::List(std::move(*items));
  }
  if (name == "abs") {
    if (input.is_float()) return Value::Float(std::fabs(input.as_float()));
    if (input.is_int() || input.is_bool()) {
      if (input.as_int() == INT64_MIN) return absl::OutOfRangeError("abs(): integer overflow");
      return Value::Int(std::llabs(input.as_int()));
    }
    return TypeError(StrCat("bad operand type for abs(): '", input.TypeName(), "'"));
  }
  return absl::UnimplementedError(StrCat("the filter '", name, "'"));
}

absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& input, const CallArgs& args) {
  auto one_arg = [&]() -> absl::StatusOr<Value> {
    if (args.positional.size() != 1 || !args.keyword.empty()) {
      return TypeError(StrCat("test '", name, "' takes one argument"));
    }
    return args.positional[0];
  };
  if (name == "divisibleby" || name == "eq" || name == "equalto" || name == "==" || name == "ne" ||
      name == "!=" || name == "lt" || name == "<" || name == "le" || name == "<=" || name == "gt" ||
      name == ">" || name == "ge" || name == ">=" || name == "in" || name == "sameas") {
    absl::StatusOr<Value> other = one_arg();
    if (!other.ok()) return other.status();
    if (name == "divisibleby") {
      if (!input.is_number() || !other->is_number() || input.is_float() || other->is_float()) {
        return absl::UnimplementedError("divisibleby on non-integers");
      }
      if (other->as_int() == 0) return absl::InvalidArgumentError("divisibleby 0");
      return input.as_int() % other->as_int() == 0;
    }
    if (name == "eq" || name == "equalto" || name == "==") return Equals(input, *other);
    if (name == "ne" || name == "!=") return !Equals(input, *other);
    if (name == "in") return Contains(*other, input);
    if (name == "sameas") {
      if (input.is_none() || input.is_bool() || input.is_undefined()) {
        return input.kind() == other->kind() && Equals(input, *other);
      }
      return absl::UnimplementedError("'sameas' on values other than none, true and false");
    }
    if (name == "lt" || name == "<") return LessThan(input, *other);
    if (name == "gt" || name == ">") return LessThan(*other, input);
    if (name == "le" || name == "<=") {
      absl::StatusOr<bool> gt = LessThan(*other, input);
      if (!gt.ok()) return gt.status();
      return !*gt;
    }
    absl::StatusOr<bool> lt = LessThan(input, *other);  // ge
    if (!lt.ok()) return lt.status();
    return !*lt;
  }
  if (absl::Status s = NoArgs(StrCat("test ", name), args); !s.ok()) return s;
  if (name == "defined") return !input.is_undefined();
  if (name == "undefined") return input.is_undefined();
  if (name == "none") return input.is_none();
  if (name == "boolean") return input.is_bool();
  if (name == "true") return input.is_bool() && input.as_bool();
  if (name == "false") return input.is_bool() && !input.as_bool();
  if (name == "integer") return input.is_int();
  if (name == "float") return input.is_float();
  if (name == "number") return input.is_number();
  if (name == "string") return input.is_string();
  if (name == "mapping") return input.is_dict();
  if (name == "callable") return input.is_callable();
  if (name == "iterable") {
    return input.is_string() || input.is_list() || input.is_dict() || input.is_undefined();
  }
  if (name == "sequence") {
    return input.is_string() || input.is_list() || input.is_dict() || input.is_undefined();
  }
  if (name == "odd" || name == "even") {
    if (!input.is_int() && !input.is_bool()) {
      return TypeError(StrCat("test '", name, "' of ", input.TypeName()));
    }
    const bool odd = (input.as_int() % 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  if (name == "lower" || name == "upper") {
    if (!input.is_string()) return TypeError(StrCat("test '", name, "' of ", input.TypeName()));
    // str.islower(): at least one cased character and no cased character of the other case.
    absl::StatusOr<std::string> other_case =
        name == "lower" ? PyUpper(input.as_string()) : PyLower(input.as_string());
    if (!other_case.ok()) return other_case.status();
    absl::StatusOr<std::string> same_case =
        name == "lower" ? PyLower(input.as_string()) : PyUpper(input.as_string());
    if (!same_case.ok()) return same_case.status();
    return *same_case == input.as_string() && *other_case != input.as_string();
  }
  return absl::UnimplementedError(StrCat("the test '", name, "'"));
}

absl::StatusOr<Value> GetAttribute(const Value& object, std::string_view name) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      return absl::InvalidArgumentError(
          object.undefined_hint().empty() ? StrCat("undefined value has no attribute '", name, "'")
                                          : object.undefined_hint());
    case Value::Kind::kDict:
      if (IsDictMethod(name)) return BoundMethod(object, "dict", std::string(name));
      if (const Value* v = object.Find(name)) return *v;
      break;
    case Value::Kind::kNamespace:
      if (const Value* v = object.Find(name)) return *v;
      break;
    case Value::Kind::kString:
      if (IsStrMethod(name)) return BoundMethod(object, "str", std::string(name));
      break;
    case Value::Kind::kList:
      if (IsListMethod(name))
        return BoundMethod(object, object.is_tuple() ? "tuple" : "list", std::string(name));
      break;
    default:
      break;
  }
  return Value::Undefined(StrCat("'", JinjaTypeName(object), "' has no attribute '", name, "'"));
}

absl::StatusOr<Value> GetItem(const Value& object, const Value& key) {
  if (object.is_undefined()) return GetAttribute(object, "");
  if ((object.is_list() || object.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (object.is_list()) {
      const int64_t n = static_cast<int64_t>(object.as_list().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return object.as_list()[i];
    } else {
      const std::u32string cps = DecodeUtf8(object.as_string());
      const int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::String(EncodeUtf8(std::u32string_view(cps).substr(i, 1)));
    }
    return Value::Undefined(StrCat("'", JinjaTypeName(object), "' has no element ", key.as_int()));
  }
  if (object.is_dict() && key.is_string()) {
    if (const Value* v = object.Find(key.as_string())) return *v;
  }
  if (key.is_string()) return GetAttribute(object, key.as_string());
  absl::StatusOr<std::string> repr = ToPythonRepr(key);
  return Value::Undefined(
      StrCat("'", JinjaTypeName(object), "' has no element ", repr.ok() ? *repr : "?"));
}

absl::StatusOr<ValueList> Iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return ValueList{};
    case Value::Kind::kList:
      return value.as_list();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& [k, v] : value.as_dict()) keys.push_back(Value::String(k));
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      for (char32_t c : DecodeUtf8(value.as_string())) {
        std::string s;
        AppendUtf8(c, s);
        chars.push_back(Value::String(std::move(s)));
      }
      return chars;
    }
    default:
      return TypeError(StrCat("'", value.TypeName(), "' object is not iterable"));
  }
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return TypeError(
            StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.as_list()) {
        if (Equals(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return item.is_string() && container.Find(item.as_string()) != nullptr;
    default:
      return TypeError(StrCat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

}  // namespace flywheel::jinja
