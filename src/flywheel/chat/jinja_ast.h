// The syntax tree of a parsed template: expressions and statements, each with its template line
// so that errors at render time can say where they happened.
#ifndef FLYWHEEL_CHAT_JINJA_AST_H_
#define FLYWHEEL_CHAT_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "flywheel/chat/jinja_value.h"

namespace flywheel::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // items
    kTuple,      // items
    kDict,       // items: key0, value0, key1, value1, …
    kAttribute,  // items[0].name
    kSubscript,  // items[0][items[1]]
    kSlice,      // items[0][start:stop:step]; absent parts are null in slice_parts
    kCall,       // items[0](args…, kwargs…)
    kFilter,     // items[0] | name(args…, kwargs…)
    kTest,       // items[0] is [not] name(args…)
    kUnary,      // op items[0]: "-", "+", "not"
    kBinary,     // items[0] op items[1]: + - * / // % ** ~ and or
    kCompare,    // items[0] ops[0] items[1] ops[1] items[2] … (chained, as Python)
    kCondition,  // items[0] if items[1] else items[2] (items[2] null: undefined)
  };
  Kind kind;
  int line = 0;
  Value value;                 // kLiteral
  std::string name;            // kName, kAttribute, kFilter, kTest; operator of kUnary/kBinary
  std::vector<ExprPtr> items;  // operands, in the order above
  std::vector<ExprPtr> args;   // positional arguments of kCall, kFilter, kTest
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "not in"
  ExprPtr slice_parts[3];        // kSlice: start, stop, step
  bool negated = false;          // kTest: `is not`
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  enum class Kind {
    kText,    // text
    kOutput,  // {{ expr }}
    kIf,      // conditions[i] → bodies[i]; an else body is bodies.back() when it has no condition
    kFor,     // {% for targets in expr [if filter] %} bodies[0] {% else %} bodies[1]
    kSet,     // {% set targets = expr %} or {% set target.attribute = expr %}
    kSetBlock,  // {% set target %} bodies[0] {% endset %}
    kMacro,     // {% macro name(params) %} bodies[0]
    kBreak,
    kContinue,
    kScope,  // bodies[0] rendered as is: {% generation %} … {% endgeneration %}
  };
  Kind kind;
  int line = 0;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput, kFor (iterable), kSet (value)
  ExprPtr filter;                    // kFor: `if` clause
  std::vector<std::string> targets;  // kFor, kSet, kSetBlock: names (several: unpacking)
  std::string attribute;             // kSet: `ns.attribute`
  std::vector<ExprPtr> conditions;   // kIf
  std::vector<Body> bodies;
  std::string name;                // kMacro
  std::vector<MacroParam> params;  // kMacro
};

}  // namespace flywheel::jinja

#endif  // FLYWHEEL_CHAT_JINJA_AST_H_
