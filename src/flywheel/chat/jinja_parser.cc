#include "flywheel/chat/jinja_parser.h"

#include <set>

#include "absl/status/status.h"
#include "flywheel/chat/jinja_builtins.h"
#include "flywheel/core/strings.h"

namespace flywheel::jinja {
namespace {

// Jinja2 has no such bound, but Python's recursion limit (1,000 frames) stops it near this depth.
constexpr int kMaxNesting = 128;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  absl::StatusOr<Body> ParseTemplate() {
    std::string end_tag;
    absl::StatusOr<Body> body = ParseBody({}, &end_tag);
    if (!body.ok()) return body.status();
    return body;
  }

 private:
  // ---- token stream ----
  const Token& Peek(size_t ahead = 0) const {
    const size_t i = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[i];
  }
  const Token& Next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).type == TokenType::kOperator && Peek(ahead).value == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).type == TokenType::kName && Peek(ahead).value == name;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }

  static std::string Describe(const Token& t) {
    switch (t.type) {
      case TokenType::kText:
        return "template text";
      case TokenType::kVariableBegin:
        return "'{{'";
      case TokenType::kVariableEnd:
        return "'}}'";
      case TokenType::kBlockBegin:
        return "'{%'";
      case TokenType::kBlockEnd:
        return "'%}'";
      case TokenType::kEnd:
        return "end of template";
      case TokenType::kString:
        return "a string";
      default:
        return StrCat("'", t.value, "'");
    }
  }

  absl::Status Error(int line, std::string_view message) const {
    return absl::InvalidArgumentError(StrCat("line ", line, ": ", message));
  }
  absl::Status Unsupported(int line, std::string_view what) const {
    return absl::UnimplementedError(StrCat("line ", line, ": ", what, " is not supported"));
  }
  absl::Status Expected(std::string_view what) const {
    return Error(Peek().line, StrCat("expected ", what, ", got ", Describe(Peek())));
  }
  absl::Status ExpectOp(std::string_view op) {
    if (!SkipOp(op)) return Expected(StrCat("'", op, "'"));
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Peek().type != TokenType::kBlockEnd) return Expected("'%}'");
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Peek().type != TokenType::kName) return Expected("a name");
    return Next().value;
  }

  // ---- statements ----

  // Parses until `{% tag %}` with tag in end_tags (consumes `{%` and the tag name, leaves the
  // rest of that tag to the caller) or, with no end tags, until the end of the template.
  absl::StatusOr<Body> ParseBody(const std::set<std::string>& end_tags, std::string* end_tag) {
    Nesting nesting(this);
    if (absl::Status s = nesting.Check(Peek().line); !s.ok()) return s;
    Body body;
    while (true) {
      const Token& t = Peek();
      if (t.type == TokenType::kEnd) {
        if (end_tags.empty()) return body;
        return Error(t.line, StrCat("unexpected end of template: expected {% ",
                                    Join(end_tags, " %} or {% "), " %}"));
      }
      if (t.type == TokenType::kText) {
        auto stmt = std::make_unique<Stmt>();
        stmt->kind = Stmt::Kind::kText;
        stmt->line = t.line;
        stmt->text = t.value;
        body.push_back(std::move(stmt));
        Next();
        continue;
      }
      if (t.type == TokenType::kVariableBegin) {
        Next();
        auto stmt = std::make_unique<Stmt>();
        stmt->kind = Stmt::Kind::kOutput;
        stmt->line = t.line;
        absl::StatusOr<ExprPtr> e = ParseTuple(true);
        if (!e.ok()) return e.status();
        stmt->expr = std::move(*e);
        if (Peek().type != TokenType::kVariableEnd) return Expected("'}}'");
        Next();
        body.push_back(std::move(stmt));
        continue;
      }
      if (t.type != TokenType::kBlockBegin) return Expected("template text, '{{' or '{%'");
      if (Peek(1).type != TokenType::kName) {
        Next();
        return Expected("a statement name after '{%'");
      }
      const std::string& tag = Peek(1).value;
      if (end_tags.count(tag) > 0) {
        Next();
        Next();
        *end_tag = tag;
        return body;
      }
      Next();
      absl::StatusOr<StmtPtr> stmt = ParseStatement();
      if (!stmt.ok()) return stmt.status();
      body.push_back(std::move(*stmt));
    }
  }

  absl::StatusOr<StmtPtr> ParseStatement() {
    const Token& t = Next();
    const std::string tag = t.value;
    if (tag == "if") return ParseIf(t.line);
    if (tag == "for") return ParseFor(t.line);
    if (tag == "set") return ParseSet(t.line);
    if (tag == "macro") return ParseMacro(t.line);
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return Error(t.line, StrCat("'", tag, "' outside of a for loop"));
      auto stmt = std::make_unique<Stmt>();
      stmt->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      stmt->line = t.line;
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      return stmt;
    }
    if (tag == "generation") {
      // transformers' AssistantTracker marks assistant text with it; it renders its body.
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      auto stmt = std::make_unique<Stmt>();
      stmt->kind = Stmt::Kind::kScope;
      stmt->line = t.line;
      std::string end;
      absl::StatusOr<Body> body = ParseBody({"endgeneration"}, &end);
      if (!body.ok()) return body.status();
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      stmt->bodies.push_back(std::move(*body));
      return stmt;
    }
    static const std::set<std::string> kKnownUnsupported = {
        "include", "import", "from", "extends", "block",      "call",
        "filter",  "raw",    "with", "do",      "autoescape", "trans"};
    if (kKnownUnsupported.count(tag) > 0) return Unsupported(t.line, StrCat("{% ", tag, " %}"));
    return Error(t.line, StrCat("unknown statement {% ", tag, " %}"));
  }

  absl::StatusOr<StmtPtr> ParseIf(int line) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = Stmt::Kind::kIf;
    stmt->line = line;
    while (true) {
      absl::StatusOr<ExprPtr> cond = ParseTuple(true);
      if (!cond.ok()) return cond.status();
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      std::string end;
      absl::StatusOr<Body> body = ParseBody({"elif", "else", "endif"}, &end);
      if (!body.ok()) return body.status();
      stmt->conditions.push_back(std::move(*cond));
      stmt->bodies.push_back(std::move(*body));
      if (end == "elif") continue;
      if (end == "else") {
        if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
        absl::StatusOr<Body> else_body = ParseBody({"endif"}, &end);
        if (!else_body.ok()) return else_body.status();
        stmt->bodies.push_back(std::move(*else_body));
      }
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      return stmt;
    }
  }

  // A name, or names separated by commas (optionally in parentheses).
  absl::Status ParseTargets(std::vector<std::string>* targets) {
    const bool paren = SkipOp("(");
    while (true) {
      absl::StatusOr<std::string> name = ExpectName();
      if (!name.ok()) return name.status();
      targets->push_back(*name);
      if (!SkipOp(",")) break;
      if (Peek().type != TokenType::kName) break;
    }
    if (paren) return ExpectOp(")");
    return absl::OkStatus();
  }

  absl::StatusOr<StmtPtr> ParseFor(int line) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = Stmt::Kind::kFor;
    stmt->line = line;
    if (absl::Status s = ParseTargets(&stmt->targets); !s.ok()) return s;
    if (!SkipName("in")) return Expected("'in'");
    absl::StatusOr<ExprPtr> iterable = ParseTuple(false);
    if (!iterable.ok()) return iterable.status();
    stmt->expr = std::move(*iterable);
    if (SkipName("if")) {
      absl::StatusOr<ExprPtr> filter = ParseExpression(true);
      if (!filter.ok()) return filter.status();
      stmt->filter = std::move(*filter);
    }
    if (IsName("recursive")) return Unsupported(Peek().line, "a recursive for loop");
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    ++loop_depth_;
    std::string end;
    absl::StatusOr<Body> body = ParseBody({"else", "endfor"}, &end);
    --loop_depth_;
    if (!body.ok()) return body.status();
    stmt->bodies.push_back(std::move(*body));
    if (end == "else") {
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      absl::StatusOr<Body> else_body = ParseBody({"endfor"}, &end);
      if (!else_body.ok()) return else_body.status();
      stmt->bodies.push_back(std::move(*else_body));
    }
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    return stmt;
  }

  absl::StatusOr<StmtPtr> ParseSet(int line) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = Stmt::Kind::kSet;
    stmt->line = line;
    if (Peek().type == TokenType::kName && IsOp(".", 1)) {
      stmt->targets.push_back(Next().value);
      Next();
      absl::StatusOr<std::string> attribute = ExpectName();
      if (!attribute.ok()) return attribute.status();
      stmt->attribute = *attribute;
    } else if (absl::Status s = ParseTargets(&stmt->targets); !s.ok()) {
      return s;
    }
    if (SkipOp("=")) {
      absl::StatusOr<ExprPtr> value = ParseTuple(true);
      if (!value.ok()) return value.status();
      stmt->expr = std::move(*value);
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      return stmt;
    }
    if (IsOp("|")) return Unsupported(Peek().line, "a filter on a {% set %} block");
    if (!stmt->attribute.empty() || stmt->targets.size() != 1) {
      return Expected("'=' (a block set assigns one plain name)");
    }
    stmt->kind = Stmt::Kind::kSetBlock;
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    std::string end;
    absl::StatusOr<Body> body = ParseBody({"endset"}, &end);
    if (!body.ok()) return body.status();
    stmt->bodies.push_back(std::move(*body));
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    return stmt;
  }

  absl::StatusOr<StmtPtr> ParseMacro(int line) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = Stmt::Kind::kMacro;
    stmt->line = line;
    absl::StatusOr<std::string> name = ExpectName();
    if (!name.ok()) return name.status();
    stmt->name = *name;
    if (absl::Status s = ExpectOp("("); !s.ok()) return s;
    while (!SkipOp(")")) {
      if (!stmt->params.empty()) {
        if (absl::Status s = ExpectOp(","); !s.ok()) return s;
        if (SkipOp(")")) break;
      }
      if (IsOp("*") || IsOp("**")) return Unsupported(Peek().line, "*args in a macro");
      absl::StatusOr<std::string> param = ExpectName();
      if (!param.ok()) return param.status();
      MacroParam p{*param, nullptr};
      if (SkipOp("=")) {
        absl::StatusOr<ExprPtr> dflt = ParseExpression(true);
        if (!dflt.ok()) return dflt.status();
        p.default_value = std::move(*dflt);
      }
      stmt->params.push_back(std::move(p));
    }
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    const int saved_depth = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    absl::StatusOr<Body> body = ParseBody({"endmacro"}, &end);
    loop_depth_ = saved_depth;
    if (!body.ok()) return body.status();
    stmt->bodies.push_back(std::move(*body));
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    return stmt;
  }

  // ---- expressions ----

  ExprPtr Make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  bool AtTupleEnd() const {
    const Token& t = Peek();
    return t.type == TokenType::kVariableEnd || t.type == TokenType::kBlockEnd ||
           t.type == TokenType::kEnd || IsOp(")") || IsOp("]") || IsOp("}") || IsOp("=") ||
           IsName("if") || IsName("recursive");
  }

  // `a, b` without brackets is a tuple (in {{ }}, set values and for iterables).
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condition) {
    const int line = Peek().line;
    absl::StatusOr<ExprPtr> first = ParseExpression(with_condition);
    if (!first.ok()) return first.status();
    if (!IsOp(",")) return first;
    auto tuple = Make(Expr::Kind::kTuple, line);
    tuple->items.push_back(std::move(*first));
    while (SkipOp(",")) {
      if (AtTupleEnd()) break;
      absl::StatusOr<ExprPtr> item = ParseExpression(with_condition);
      if (!item.ok()) return item.status();
      tuple->items.push_back(std::move(*item));
    }
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condition) {
    return with_condition ? ParseCondition() : ParseOr();
  }

  absl::StatusOr<ExprPtr> ParseCondition() {
    int line = Peek().line;
    absl::StatusOr<ExprPtr> expr = ParseOr();
    if (!expr.ok()) return expr;
    ExprPtr result = std::move(*expr);
    while (SkipName("if")) {
      absl::StatusOr<ExprPtr> cond = ParseOr();
      if (!cond.ok()) return cond;
      ExprPtr otherwise;
      if (SkipName("else")) {
        absl::StatusOr<ExprPtr> e = ParseCondition();
        if (!e.ok()) return e;
        otherwise = std::move(*e);
      }
      auto node = Make(Expr::Kind::kCondition, line);
      node->items.push_back(std::move(result));
      node->items.push_back(std::move(*cond));
      node->items.push_back(std::move(otherwise));
      result = std::move(node);
      line = Peek().line;
    }
    return result;
  }

  absl::StatusOr<ExprPtr> ParseBinaryLeft(std::initializer_list<std::string_view> ops, bool names,
                                          absl::StatusOr<ExprPtr> (Parser::*operand)()) {
    absl::StatusOr<ExprPtr> left = (this->*operand)();
    if (!left.ok()) return left;
    ExprPtr result = std::move(*left);
    while (true) {
      std::string op;
      for (std::string_view candidate : ops) {
        if (names ? IsName(candidate) : IsOp(candidate)) op = std::string(candidate);
      }
      if (op.empty()) return result;
      const int line = Next().line;
      absl::StatusOr<ExprPtr> right = (this->*operand)();
      if (!right.ok()) return right;
      auto node = Make(Expr::Kind::kBinary, line);
      node->name = op;
      node->items.push_back(std::move(result));
      node->items.push_back(std::move(*right));
      result = std::move(node);
    }
  }

  absl::StatusOr<ExprPtr> ParseOr() { return ParseBinaryLeft({"or"}, true, &Parser::ParseAnd); }
  absl::StatusOr<ExprPtr> ParseAnd() { return ParseBinaryLeft({"and"}, true, &Parser::ParseNot); }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      const int line = Next().line;
      absl::StatusOr<ExprPtr> operand = ParseNot();
      if (!operand.ok()) return operand;
      auto node = Make(Expr::Kind::kUnary, line);
      node->name = "not";
      node->items.push_back(std::move(*operand));
      return node;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const int line = Peek().line;
    absl::StatusOr<ExprPtr> first = ParseMath1();
    if (!first.ok()) return first;
    ExprPtr node;
    while (true) {
      std::string op;
      const Token& t = Peek();
      if (t.type == TokenType::kOperator &&
          (t.value == "==" || t.value == "!=" || t.value == "<" || t.value == "<=" ||
           t.value == ">" || t.value == ">=")) {
        op = t.value;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && IsName("in", 1)) {
        op = "not in";
        Next();
        Next();
      } else {
        break;
      }
      absl::StatusOr<ExprPtr> operand = ParseMath1();
      if (!operand.ok()) return operand;
      if (node == nullptr) {
        node = Make(Expr::Kind::kCompare, line);
        node->items.push_back(std::move(*first));
      }
      node->ops.push_back(op);
      node->items.push_back(std::move(*operand));
    }
    if (node == nullptr) return std::move(*first);
    return node;
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    return ParseBinaryLeft({"+", "-"}, false, &Parser::ParseConcat);
  }
  absl::StatusOr<ExprPtr> ParseConcat() {
    return ParseBinaryLeft({"~"}, false, &Parser::ParseMath2);
  }
  absl::StatusOr<ExprPtr> ParseMath2() {
    return ParseBinaryLeft({"*", "/", "//", "%"}, false, &Parser::ParsePow);
  }
  absl::StatusOr<ExprPtr> ParsePow() {
    return ParseBinaryLeft({"**"}, false, &Parser::ParseUnaryWithFilters);
  }
  absl::StatusOr<ExprPtr> ParseUnaryWithFilters() { return ParseUnary(true); }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    Nesting nesting(this);
    if (absl::Status s = nesting.Check(Peek().line); !s.ok()) return s;
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const Token& t = Next();
      absl::StatusOr<ExprPtr> operand = ParseUnary(false);
      if (!operand.ok()) return operand;
      node = Make(Expr::Kind::kUnary, t.line);
      node->name = t.value;
      node->items.push_back(std::move(*operand));
    } else {
      absl::StatusOr<ExprPtr> primary = ParsePrimary();
      if (!primary.ok()) return primary;
      node = std::move(*primary);
    }
    absl::StatusOr<ExprPtr> postfix = ParsePostfix(std::move(node));
    if (!postfix.ok() || !with_filter) return postfix;
    return ParseFilterExpr(std::move(*postfix));
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Peek();
    switch (t.type) {
      case TokenType::kName: {
        Next();
        auto node = Make(Expr::Kind::kLiteral, t.line);
        if (t.value == "true" || t.value == "True") {
          node->value = Value::Bool(true);
        } else if (t.value == "false" || t.value == "False") {
          node->value = Value::Bool(false);
        } else if (t.value == "none" || t.value == "None") {
          node->value = Value::None();
        } else {
          node->kind = Expr::Kind::kName;
          node->name = t.value;
        }
        return node;
      }
      case TokenType::kString: {
        std::string s;
        while (Peek().type == TokenType::kString) s += Next().value;  // 'a' 'b' is 'ab'
        auto node = Make(Expr::Kind::kLiteral, t.line);
        node->value = Value::String(std::move(s));
        return node;
      }
      case TokenType::kInteger: {
        Next();
        auto node = Make(Expr::Kind::kLiteral, t.line);
        node->value = Value::Int(t.integer);
        return node;
      }
      case TokenType::kFloat: {
        Next();
        auto node = Make(Expr::Kind::kLiteral, t.line);
        node->value = Value::Float(t.number);
        return node;
      }
      case TokenType::kOperator:
        if (t.value == "(") {
          Next();
          if (SkipOp(")")) return Make(Expr::Kind::kTuple, t.line);
          absl::StatusOr<ExprPtr> inner = ParseTuple(true);
          if (!inner.ok()) return inner;
          if (absl::Status s = ExpectOp(")"); !s.ok()) return s;
          return inner;
        }
        if (t.value == "[") return ParseList();
        if (t.value == "{") return ParseDict();
        break;
      default:
        break;
    }
    return Expected("an expression");
  }

  absl::StatusOr<ExprPtr> ParseList() {
    auto node = Make(Expr::Kind::kList, Next().line);
    while (!SkipOp("]")) {
      if (!node->items.empty()) {
        if (absl::Status s = ExpectOp(","); !s.ok()) return s;
        if (SkipOp("]")) break;
      }
      absl::StatusOr<ExprPtr> item = ParseExpression(true);
      if (!item.ok()) return item;
      node->items.push_back(std::move(*item));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParseDict() {
    auto node = Make(Expr::Kind::kDict, Next().line);
    while (!SkipOp("}")) {
      if (!node->items.empty()) {
        if (absl::Status s = ExpectOp(","); !s.ok()) return s;
        if (SkipOp("}")) break;
      }
      absl::StatusOr<ExprPtr> key = ParseExpression(true);
      if (!key.ok()) return key;
      if (absl::Status s = ExpectOp(":"); !s.ok()) return s;
      absl::StatusOr<ExprPtr> value = ParseExpression(true);
      if (!value.ok()) return value;
      node->items.push_back(std::move(*key));
      node->items.push_back(std::move(*value));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        const int line = Next().line;
        const Token& t = Next();
        if (t.type == TokenType::kName) {
          auto attr = Make(Expr::Kind::kAttribute, line);
          attr->name = t.value;
          attr->items.push_back(std::move(node));
          node = std::move(attr);
        } else if (t.type == TokenType::kInteger) {  // x.0 is x[0]
          auto item = Make(Expr::Kind::kSubscript, line);
          auto index = Make(Expr::Kind::kLiteral, line);
          index->value = Value::Int(t.integer);
          item->items.push_back(std::move(node));
          item->items.push_back(std::move(index));
          node = std::move(item);
        } else {
          return Error(t.line, StrCat("expected an attribute name after '.', got ", Describe(t)));
        }
      } else if (IsOp("[")) {
        absl::StatusOr<ExprPtr> sub = ParseSubscript(std::move(node));
        if (!sub.ok()) return sub;
        node = std::move(*sub);
      } else if (IsOp("(")) {
        absl::StatusOr<ExprPtr> call = ParseCall(std::move(node));
        if (!call.ok()) return call;
        node = std::move(*call);
      } else {
        return node;
      }
    }
  }

  bool AtSliceEnd() const { return IsOp("]") || IsOp(",") || IsOp(":"); }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr object) {
    const int line = Next().line;  // [
    ExprPtr start;
    if (!IsOp(":")) {
      absl::StatusOr<ExprPtr> index = ParseExpression(true);
      if (!index.ok()) return index;
      if (!IsOp(":")) {
        if (IsOp(",")) return Unsupported(line, "a tuple subscript x[a, b]");
        if (absl::Status s = ExpectOp("]"); !s.ok()) return s;
        auto node = Make(Expr::Kind::kSubscript, line);
        node->items.push_back(std::move(object));
        node->items.push_back(std::move(*index));
        return node;
      }
      start = std::move(*index);
    }
    auto node = Make(Expr::Kind::kSlice, line);
    node->items.push_back(std::move(object));
    node->slice_parts[0] = std::move(start);
    Next();  // :
    if (!AtSliceEnd()) {
      absl::StatusOr<ExprPtr> stop = ParseExpression(true);
      if (!stop.ok()) return stop;
      node->slice_parts[1] = std::move(*stop);
    }
    if (SkipOp(":") && !AtSliceEnd()) {
      absl::StatusOr<ExprPtr> step = ParseExpression(true);
      if (!step.ok()) return step;
      node->slice_parts[2] = std::move(*step);
    }
    if (absl::Status s = ExpectOp("]"); !s.ok()) return s;
    return node;
  }

  absl::Status ParseArguments(Expr* node) {
    if (absl::Status s = ExpectOp("("); !s.ok()) return s;
    bool first = true;
    while (!SkipOp(")")) {
      if (!first) {
        if (absl::Status s = ExpectOp(","); !s.ok()) return s;
        if (SkipOp(")")) break;
      }
      first = false;
      if (IsOp("*") || IsOp("**")) return Unsupported(Peek().line, "*args or **kwargs in a call");
      if (Peek().type == TokenType::kName && IsOp("=", 1)) {
        std::string name = Next().value;
        Next();
        absl::StatusOr<ExprPtr> value = ParseExpression(true);
        if (!value.ok()) return value.status();
        node->kwargs.emplace_back(std::move(name), std::move(*value));
        continue;
      }
      if (!node->kwargs.empty()) {
        return Error(Peek().line, "positional argument after keyword argument");
      }
      absl::StatusOr<ExprPtr> arg = ParseExpression(true);
      if (!arg.ok()) return arg.status();
      node->args.push_back(std::move(*arg));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    auto node = Make(Expr::Kind::kCall, Peek().line);
    node->items.push_back(std::move(callee));
    if (absl::Status s = ParseArguments(node.get()); !s.ok()) return s;
    return node;
  }

  absl::StatusOr<std::string> ParseDottedName() {
    absl::StatusOr<std::string> name = ExpectName();
    if (!name.ok()) return name;
    std::string out = *name;
    while (IsOp(".") && Peek(1).type == TokenType::kName) {
      Next();
      out += "." + Next().value;
    }
    return out;
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        const int line = Next().line;
        absl::StatusOr<std::string> name = ParseDottedName();
        if (!name.ok()) return name.status();
        if (!IsKnownFilter(*name)) return Unsupported(line, StrCat("the filter '", *name, "'"));
        auto filter = Make(Expr::Kind::kFilter, line);
        filter->name = *name;
        filter->items.push_back(std::move(node));
        if (IsOp("(")) {
          if (absl::Status s = ParseArguments(filter.get()); !s.ok()) return s;
        }
        node = std::move(filter);
      } else if (IsName("is")) {
        const int line = Next().line;
        auto test = Make(Expr::Kind::kTest, line);
        test->negated = SkipName("not");
        absl::StatusOr<std::string> name = ParseDottedName();
        if (!name.ok()) return name.status();
        if (!IsKnownTest(*name)) return Unsupported(line, StrCat("the test '", *name, "'"));
        test->name = *name;
        test->items.push_back(std::move(node));
        const Token& t = Peek();
        if (IsOp("(")) {
          if (absl::Status s = ParseArguments(test.get()); !s.ok()) return s;
        } else if ((t.type == TokenType::kName || t.type == TokenType::kString ||
                    t.type == TokenType::kInteger || t.type == TokenType::kFloat || IsOp("[") ||
                    IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and")) {
          // `x is divisibleby 3`: one argument without parentheses, as Jinja allows.
          absl::StatusOr<ExprPtr> arg = ParsePrimary();
          if (!arg.ok()) return arg;
          absl::StatusOr<ExprPtr> post = ParsePostfix(std::move(*arg));
          if (!post.ok()) return post;
          test->args.push_back(std::move(*post));
        }
        node = std::move(test);
      } else if (IsOp("(")) {
        absl::StatusOr<ExprPtr> call = ParseCall(std::move(node));
        if (!call.ok()) return call;
        node = std::move(*call);
      } else {
        return node;
      }
    }
  }

  // Every recursion of the parser passes through ParseBody (blocks) or ParseUnary (expressions):
  // counting them there bounds the stack a template can make the parser, and the renderer that
  // walks the tree it builds, use. A template from a model repository is outside input, and
  // 100,000 nested '(' once overflowed the stack (found by fuzz/chat_template_fuzzer.cc).
  class Nesting {
   public:
    explicit Nesting(Parser* parser) : parser_(parser) { ++parser_->nesting_; }
    ~Nesting() { --parser_->nesting_; }
    absl::Status Check(int line) const {
      if (parser_->nesting_ <= kMaxNesting) return absl::OkStatus();
      return parser_->Error(line, StrCat("nested deeper than ", kMaxNesting,
                                         " levels (blocks and expressions together)"));
    }

   private:
    Parser* parser_;
  };

  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;  // ParseBody and ParseUnary calls in progress
};

}  // namespace

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens) {
  return Parser(tokens).ParseTemplate();
}

}  // namespace flywheel::jinja
