#include "flywheel/chat/jinja_template.h"

#include <unordered_map>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "flywheel/chat/jinja_builtins.h"
#include "flywheel/chat/jinja_lexer.h"
#include "flywheel/chat/jinja_parser.h"
#include "flywheel/chat/python_ops.h"
#include "flywheel/chat/python_string.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel::jinja {
namespace {

// Jinja's sandbox refuses ranges longer than this (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

// Prefixes "line N: " unless the error already names a line (it came from a nested node).
absl::Status AtLine(int line, const absl::Status& status) {
  if (status.ok() || absl::StartsWith(status.message(), "line ")) return status;
  return absl::Status(status.code(), StrCat("line ", line, ": ", status.message()));
}

struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;

  const Value* Lookup(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

// Macro calls in progress at once (each walks its body's tree, bounded by the parser's nesting).
constexpr int kMaxMacroDepth = 64;

absl::StatusOr<Value> Range(CallArgs args) {
  if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) {
    return absl::InvalidArgumentError("range() takes 1 to 3 integer arguments");
  }
  for (const Value& v : args.positional) {
    if (!v.is_int() && !v.is_bool()) {
      return absl::InvalidArgumentError(
          StrCat("range(): '", v.TypeName(), "' object cannot be interpreted as an integer"));
    }
  }
  int64_t start = 0, stop = 0, step = 1;
  if (args.positional.size() == 1) {
    stop = args.positional[0].as_int();
  } else {
    start = args.positional[0].as_int();
    stop = args.positional[1].as_int();
    if (args.positional.size() == 3) step = args.positional[2].as_int();
  }
  if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
  ValueList out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) {
      return absl::OutOfRangeError(
          StrCat("range too big; the sandbox allows at most ", kMaxRange, " items"));
    }
    out.push_back(Value::Int(i));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> MakeNamespaceValue(CallArgs args) {
  ValueDict attributes;
  for (const Value& v : args.positional) {
    if (!v.is_dict()) return absl::InvalidArgumentError("namespace() takes a mapping");
    for (const auto& item : v.as_dict()) attributes.push_back(item);
  }
  for (auto& [k, v] : args.keyword) attributes.emplace_back(k, v);
  return Value::MakeNamespace(std::move(attributes));
}

absl::StatusOr<Value> MakeDict(CallArgs args) {
  ValueDict items;
  for (const Value& v : args.positional) {
    if (!v.is_dict()) return absl::UnimplementedError("dict() of anything but a mapping");
    for (const auto& item : v.as_dict()) items.push_back(item);
  }
  for (auto& [k, v] : args.keyword) items.emplace_back(k, v);
  return Value::Dict(std::move(items));
}

class Renderer {
 public:
  Renderer(const ValueDict& variables, const RenderOptions& options) : options_(options) {
    root_ = std::make_shared<Scope>();
    root_->vars["range"] = Value::Function("range", Range);
    root_->vars["namespace"] =
        Value::Function("namespace", [this](CallArgs args) -> absl::StatusOr<Value> {
          absl::StatusOr<Value> ns = MakeNamespaceValue(std::move(args));
          if (ns.ok()) namespaces_.push_back(*ns);
          return ns;
        });
    root_->vars["dict"] = Value::Function("dict", MakeDict);
    root_->vars["raise_exception"] =
        Value::Function("raise_exception", [](CallArgs args) -> absl::StatusOr<Value> {
          std::string message;
          if (!args.positional.empty()) {
            absl::StatusOr<std::string> s = ToPythonStr(args.positional[0]);
            if (s.ok()) message = *s;
          }
          return absl::InvalidArgumentError(StrCat("raise_exception: ", message));
        });
    root_->vars["strftime_now"] =
        Value::Function("strftime_now", [this](CallArgs args) -> absl::StatusOr<Value> {
          if (args.positional.size() != 1 || !args.positional[0].is_string()) {
            return absl::InvalidArgumentError("strftime_now() takes one format string");
          }
          const absl::Time now = options_.now ? options_.now() : absl::Now();
          return Value::String(
              absl::FormatTime(args.positional[0].as_string(), now, options_.time_zone));
        });
    // The template's variables shadow the built-ins, as Jinja's render(**kwargs) does globals.
    for (const auto& [k, v] : variables) root_->vars[k] = v;
    // Templates read state from the template's own top level (ns, macros) through this scope.
    top_ = std::make_shared<Scope>();
    top_->parent = root_;
  }

  // A render can make reference cycles: a macro holds the scope it was defined in, which holds
  // the macro, and a namespace can hold itself ({% set ns.self = ns %}) or a macro. Nothing of a
  // render outlives it (the result is a string), so emptying those scopes and namespaces here
  // frees them; otherwise every render of such a template leaked them.
  ~Renderer() {
    for (const ScopePtr& scope : macro_scopes_) scope->vars.clear();
    for (const Value& ns : namespaces_) ns.as_namespace().attributes.clear();
  }
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  absl::StatusOr<std::string> Run(const Body& body) {
    std::string out;
    absl::StatusOr<Flow> flow = Exec(body, top_, out);
    if (!flow.ok()) return flow.status();
    return out;
  }

 private:
  // ---- statements ----

  absl::StatusOr<Flow> Exec(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const StmtPtr& stmt : body) {
      absl::StatusOr<Flow> flow = ExecOne(*stmt, scope, out);
      if (!flow.ok()) return AtLine(stmt->line, flow.status());
      if (*flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> ExecOne(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
    switch (stmt.kind) {
      case Stmt::Kind::kText:
        out += stmt.text;
        return Flow::kNormal;
      case Stmt::Kind::kOutput: {
        absl::StatusOr<Value> v = Eval(*stmt.expr, scope);
        if (!v.ok()) return v.status();
        absl::StatusOr<std::string> s = ToPythonStr(*v);
        if (!s.ok()) return AtLine(stmt.line, s.status());
        out += *s;
        return Flow::kNormal;
      }
      case Stmt::Kind::kIf:
        for (size_t i = 0; i < stmt.bodies.size(); ++i) {
          if (i < stmt.conditions.size()) {
            absl::StatusOr<Value> cond = Eval(*stmt.conditions[i], scope);
            if (!cond.ok()) return cond.status();
            if (!Truthy(*cond)) continue;
          }
          return Exec(stmt.bodies[i], scope, out);
        }
        return Flow::kNormal;
      case Stmt::Kind::kFor:
        return ExecFor(stmt, scope, out);
      case Stmt::Kind::kSet: {
        absl::StatusOr<Value> v = Eval(*stmt.expr, scope);
        if (!v.ok()) return v.status();
        if (!stmt.attribute.empty()) {
          const Value* target = scope->Lookup(stmt.targets[0]);
          if (target == nullptr || !target->is_namespace()) {
            return absl::InvalidArgumentError(
                StrCat("line ", stmt.line, ": cannot assign attribute on non-namespace object '",
                       stmt.targets[0], "'"));
          }
          ValueDict& attributes = target->as_namespace().attributes;
          for (auto& [k, old] : attributes) {
            if (k == stmt.attribute) {
              old = std::move(*v);
              return Flow::kNormal;
            }
          }
          attributes.emplace_back(stmt.attribute, std::move(*v));
          return Flow::kNormal;
        }
        if (absl::Status s = Assign(stmt.targets, *v, *scope, stmt.line); !s.ok()) return s;
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        absl::StatusOr<Flow> flow = Exec(stmt.bodies[0], scope, captured);
        if (!flow.ok()) return flow.status();
        scope->vars[stmt.targets[0]] = Value::String(std::move(captured));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        scope->vars[stmt.name] = MakeMacro(stmt, scope);
        return Flow::kNormal;
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kScope:
        return Exec(stmt.bodies[0], scope, out);
    }
    return Flow::kNormal;
  }

  absl::Status Assign(const std::vector<std::string>& targets, const Value& value, Scope& scope,
                      int line) {
    if (targets.size() == 1) {
      scope.vars[targets[0]] = value;
      return absl::OkStatus();
    }
    absl::StatusOr<ValueList> items = Iterate(value);
    if (!items.ok()) return AtLine(line, items.status());
    if (items->size() != targets.size()) {
      return absl::InvalidArgumentError(StrCat("line ", line, ": cannot unpack ", items->size(),
                                               " values into ", targets.size(), " names"));
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.vars[targets[i]] = (*items)[i];
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> ExecFor(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
    absl::StatusOr<Value> iterable = Eval(*stmt.expr, scope);
    if (!iterable.ok()) return iterable.status();
    absl::StatusOr<ValueList> all = Iterate(*iterable);
    if (!all.ok()) return AtLine(stmt.line, all.status());
    ValueList items;
    if (stmt.filter != nullptr) {
      // The `if` clause filters before the loop counts: loop.length and loop.last see only the
      // items that pass.
      for (const Value& item : *all) {
        auto probe = std::make_shared<Scope>();
        probe->parent = scope;
        if (absl::Status s = Assign(stmt.targets, item, *probe, stmt.line); !s.ok()) return s;
        absl::StatusOr<Value> keep = Eval(*stmt.filter, probe);
        if (!keep.ok()) return keep.status();
        if (Truthy(*keep)) items.push_back(item);
      }
    } else {
      items = std::move(*all);
    }
    if (items.empty()) {
      if (stmt.bodies.size() > 1) {
        auto else_scope = std::make_shared<Scope>();
        else_scope->parent = scope;
        absl::StatusOr<Flow> flow = Exec(stmt.bodies[1], else_scope, out);
        if (!flow.ok()) return flow.status();
      }
      return Flow::kNormal;
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      auto iteration = std::make_shared<Scope>();
      iteration->parent = scope;
      if (absl::Status s = Assign(stmt.targets, items[i], *iteration, stmt.line); !s.ok()) {
        return s;
      }
      ValueDict loop = {
          {"index0", Value::Int(i)},
          {"index", Value::Int(i + 1)},
          {"revindex0", Value::Int(n - i - 1)},
          {"revindex", Value::Int(n - i)},
          {"first", Value::Bool(i == 0)},
          {"last", Value::Bool(i == n - 1)},
          {"length", Value::Int(n)},
          {"depth", Value::Int(1)},
          {"depth0", Value::Int(0)},
          {"previtem", i > 0 ? items[i - 1] : Value::Undefined("there is no previous item")},
          {"nextitem", i + 1 < n ? items[i + 1] : Value::Undefined("there is no next item")},
          {"cycle", Value::Function("loop.cycle",
                                    [i](CallArgs args) -> absl::StatusOr<Value> {
                                      if (args.positional.empty()) {
                                        return absl::InvalidArgumentError(
                                            "loop.cycle() needs at least one item");
                                      }
                                      return args.positional[i % args.positional.size()];
                                    })},
      };
      iteration->vars["loop"] = Value::Dict(std::move(loop));
      absl::StatusOr<Flow> flow = Exec(stmt.bodies[0], iteration, out);
      if (!flow.ok()) return flow.status();
      if (*flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value MakeMacro(const Stmt& stmt, const ScopePtr& defining_scope) {
    macro_scopes_.push_back(defining_scope);
    const Stmt* macro = &stmt;
    return Value::Function(
        StrCat("macro ", stmt.name),
        [this, macro, defining_scope](CallArgs args) -> absl::StatusOr<Value> {
          if (args.positional.size() > macro->params.size()) {
            return absl::InvalidArgumentError(StrCat("macro '", macro->name, "' takes at most ",
                                                     macro->params.size(), " arguments"));
          }
          auto scope = std::make_shared<Scope>();
          scope->parent = defining_scope;
          std::vector<bool> bound(macro->params.size(), false);
          for (size_t i = 0; i < args.positional.size(); ++i) {
            scope->vars[macro->params[i].name] = args.positional[i];
            bound[i] = true;
          }
          for (auto& [key, value] : args.keyword) {
            size_t i = 0;
            while (i < macro->params.size() && macro->params[i].name != key) ++i;
            if (i == macro->params.size()) {
              return absl::InvalidArgumentError(
                  StrCat("macro '", macro->name, "' has no parameter '", key, "'"));
            }
            scope->vars[key] = value;
            bound[i] = true;
          }
          for (size_t i = 0; i < macro->params.size(); ++i) {
            if (bound[i]) continue;
            const MacroParam& p = macro->params[i];
            if (p.default_value == nullptr) {
              // Jinja passes a missing argument as undefined.
              scope->vars[p.name] = Value::Undefined(StrCat("'", p.name, "' is undefined"));
              continue;
            }
            absl::StatusOr<Value> v = Eval(*p.default_value, scope);
            if (!v.ok()) return v.status();
            scope->vars[p.name] = *v;
          }
          // A macro that calls itself without end is Python's RecursionError in Jinja2; here it
          // would overflow the stack (found by fuzz/chat_template_fuzzer.cc).
          if (macro_depth_ >= kMaxMacroDepth) {
            return absl::InvalidArgumentError(StrCat("macro '", macro->name, "': calls nested ",
                                                     kMaxMacroDepth, " deep (endless recursion?)"));
          }
          ++macro_depth_;
          std::string out;
          absl::StatusOr<Flow> flow = Exec(macro->bodies[0], scope, out);
          --macro_depth_;
          if (!flow.ok()) return flow.status();
          return Value::String(std::move(out));
        });
  }

  // ---- expressions ----

  absl::StatusOr<Value> Eval(const Expr& e, const ScopePtr& scope) {
    absl::StatusOr<Value> v = EvalInner(e, scope);
    if (!v.ok()) return AtLine(e.line, v.status());
    return v;
  }

  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, const ScopePtr& scope) {
    CallArgs args;
    for (const ExprPtr& a : e.args) {
      absl::StatusOr<Value> v = Eval(*a, scope);
      if (!v.ok()) return v.status();
      args.positional.push_back(std::move(*v));
    }
    for (const auto& [k, a] : e.kwargs) {
      absl::StatusOr<Value> v = Eval(*a, scope);
      if (!v.ok()) return v.status();
      args.keyword.emplace_back(k, std::move(*v));
    }
    return args;
  }

  absl::StatusOr<Value> EvalInner(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName: {
        if (const Value* v = scope->Lookup(e.name)) return *v;
        return Value::Undefined(StrCat("'", e.name, "' is undefined"));
      }
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        ValueList items;
        for (const ExprPtr& item : e.items) {
          absl::StatusOr<Value> v = Eval(*item, scope);
          if (!v.ok()) return v;
          items.push_back(std::move(*v));
        }
        return Value::List(std::move(items), e.kind == Expr::Kind::kTuple);
      }
      case Expr::Kind::kDict: {
        ValueDict items;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          absl::StatusOr<Value> k = Eval(*e.items[i], scope);
          if (!k.ok()) return k;
          if (!k->is_string()) {
            return absl::UnimplementedError(
                StrCat("dict keys other than strings (got ", k->TypeName(), ")"));
          }
          absl::StatusOr<Value> v = Eval(*e.items[i + 1], scope);
          if (!v.ok()) return v;
          bool replaced = false;
          for (auto& [key, old] : items) {
            if (key == k->as_string()) {
              old = *v;
              replaced = true;
            }
          }
          if (!replaced) items.emplace_back(k->as_string(), std::move(*v));
        }
        return Value::Dict(std::move(items));
      }
      case Expr::Kind::kAttribute: {
        absl::StatusOr<Value> object = Eval(*e.items[0], scope);
        if (!object.ok()) return object;
        return GetAttribute(*object, e.name);
      }
      case Expr::Kind::kSubscript: {
        absl::StatusOr<Value> object = Eval(*e.items[0], scope);
        if (!object.ok()) return object;
        absl::StatusOr<Value> key = Eval(*e.items[1], scope);
        if (!key.ok()) return key;
        return GetItem(*object, *key);
      }
      case Expr::Kind::kSlice:
        return EvalSlice(e, scope);
      case Expr::Kind::kCall: {
        absl::StatusOr<Value> callee = Eval(*e.items[0], scope);
        if (!callee.ok()) return callee;
        absl::StatusOr<CallArgs> args = EvalArgs(e, scope);
        if (!args.ok()) return args.status();
        if (callee->is_undefined()) {
          return absl::InvalidArgumentError(callee->undefined_hint().empty()
                                                ? "call of an undefined value"
                                                : callee->undefined_hint());
        }
        if (!callee->is_callable()) {
          return absl::InvalidArgumentError(
              StrCat("'", callee->TypeName(), "' object is not callable"));
        }
        return callee->as_callable().call(std::move(*args));
      }
      case Expr::Kind::kFilter: {
        absl::StatusOr<Value> input = Eval(*e.items[0], scope);
        if (!input.ok()) return input;
        absl::StatusOr<CallArgs> args = EvalArgs(e, scope);
        if (!args.ok()) return args.status();
        absl::StatusOr<Value> r = ApplyFilter(e.name, *input, std::move(*args));
        if (!r.ok()) return Annotate(r.status(), StrCat("filter '", e.name, "'"));
        return r;
      }
      case Expr::Kind::kTest: {
        absl::StatusOr<Value> input = Eval(*e.items[0], scope);
        if (!input.ok()) return input;
        absl::StatusOr<CallArgs> args = EvalArgs(e, scope);
        if (!args.ok()) return args.status();
        absl::StatusOr<bool> r = ApplyTest(e.name, *input, *args);
        if (!r.ok()) return r.status();
        return Value::Bool(*r != e.negated);
      }
      case Expr::Kind::kUnary: {
        absl::StatusOr<Value> operand = Eval(*e.items[0], scope);
        if (!operand.ok()) return operand;
        if (e.name == "not") return Value::Bool(!Truthy(*operand));
        return UnaryOp(e.name, *operand);
      }
      case Expr::Kind::kBinary: {
        absl::StatusOr<Value> left = Eval(*e.items[0], scope);
        if (!left.ok()) return left;
        // Python's and/or return an operand, not a bool.
        if (e.name == "and") return Truthy(*left) ? Eval(*e.items[1], scope) : left;
        if (e.name == "or") return Truthy(*left) ? left : Eval(*e.items[1], scope);
        absl::StatusOr<Value> right = Eval(*e.items[1], scope);
        if (!right.ok()) return right;
        if (e.name == "~") {
          absl::StatusOr<std::string> a = ToPythonStr(*left);
          if (!a.ok()) return a.status();
          absl::StatusOr<std::string> b = ToPythonStr(*right);
          if (!b.ok()) return b.status();
          return Value::String(*a + *b);
        }
        return BinaryOp(e.name, *left, *right);
      }
      case Expr::Kind::kCompare:
        return EvalCompare(e, scope);
      case Expr::Kind::kCondition: {
        absl::StatusOr<Value> cond = Eval(*e.items[1], scope);
        if (!cond.ok()) return cond;
        if (Truthy(*cond)) return Eval(*e.items[0], scope);
        if (e.items[2] == nullptr)
          return Value::Undefined("the conditional expression has no else");
        return Eval(*e.items[2], scope);
      }
    }
    return absl::InternalError("unknown expression");
  }

  absl::StatusOr<Value> EvalCompare(const Expr& e, const ScopePtr& scope) {
    absl::StatusOr<Value> left = Eval(*e.items[0], scope);
    if (!left.ok()) return left;
    for (size_t i = 0; i < e.ops.size(); ++i) {
      absl::StatusOr<Value> right = Eval(*e.items[i + 1], scope);
      if (!right.ok()) return right;
      const std::string& op = e.ops[i];
      absl::StatusOr<bool> r;
      if (op == "==") {
        r = Equals(*left, *right);
      } else if (op == "!=") {
        r = !Equals(*left, *right);
      } else if (op == "in" || op == "not in") {
        r = Contains(*right, *left);
        if (r.ok() && op == "not in") r = !*r;
      } else if (op == "<") {
        r = LessThan(*left, *right);
      } else if (op == ">") {
        r = LessThan(*right, *left);
      } else if (op == "<=") {
        r = LessThan(*right, *left);
        if (r.ok()) r = !*r;
      } else {  // >=
        r = LessThan(*left, *right);
        if (r.ok()) r = !*r;
      }
      if (!r.ok()) return r.status();
      if (!*r) return Value::Bool(false);
      left = std::move(right);
    }
    return Value::Bool(true);
  }

  absl::StatusOr<Value> EvalSlice(const Expr& e, const ScopePtr& scope) {
    absl::StatusOr<Value> object = Eval(*e.items[0], scope);
    if (!object.ok()) return object;
    std::optional<int64_t> parts[3];
    for (int i = 0; i < 3; ++i) {
      if (e.slice_parts[i] == nullptr) continue;
      absl::StatusOr<Value> v = Eval(*e.slice_parts[i], scope);
      if (!v.ok()) return v;
      if (v->is_none()) continue;
      if (!v->is_int() && !v->is_bool()) {
        return absl::InvalidArgumentError(
            "slice indices must be integers or None or have an __index__ method");
      }
      parts[i] = v->as_int();
    }
    if (object->is_string()) {
      const std::u32string cps = DecodeUtf8(object->as_string());
      absl::StatusOr<std::vector<int64_t>> idx =
          SliceIndices(static_cast<int64_t>(cps.size()), parts[0], parts[1], parts[2]);
      if (!idx.ok()) return idx.status();
      std::u32string out;
      for (int64_t i : *idx) out.push_back(cps[i]);
      return Value::String(EncodeUtf8(out));
    }
    if (object->is_list()) {
      const ValueList& items = object->as_list();
      absl::StatusOr<std::vector<int64_t>> idx =
          SliceIndices(static_cast<int64_t>(items.size()), parts[0], parts[1], parts[2]);
      if (!idx.ok()) return idx.status();
      ValueList out;
      for (int64_t i : *idx) out.push_back(items[i]);
      return Value::List(std::move(out), object->is_tuple());
    }
    if (object->is_undefined()) return GetAttribute(*object, "");
    return absl::InvalidArgumentError(
        StrCat("'", object->TypeName(), "' object is not subscriptable"));
  }

  const RenderOptions& options_;
  ScopePtr root_;
  ScopePtr top_;
  int macro_depth_ = 0;                 // macro calls in progress
  std::vector<ScopePtr> macro_scopes_;  // every scope a macro was defined in (see ~Renderer)
  std::vector<Value> namespaces_;       // every namespace() made
};

}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(source);
  if (!tokens.ok()) return tokens.status();
  absl::StatusOr<Body> body = jinja::Parse(*tokens);
  if (!body.ok()) return body.status();
  return Template(std::make_shared<const Body>(std::move(*body)));
}

absl::StatusOr<std::string> Template::Render(const ValueDict& variables,
                                             const RenderOptions& options) const {
  Renderer renderer(variables, options);
  return renderer.Run(*body_);
}

}  // namespace flywheel::jinja
