// Each construct of the Jinja subset, checked against the text Python's Jinja2 renders in
// transformers' environment (the expectations were produced by Jinja2 3.1), and the errors:
// unsupported constructs and runtime failures name the template line.
#include "flywheel/chat/jinja_template.h"

#include <memory>
#include <string>

#include "flywheel/core/strings.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::jinja {
namespace {

using ::testing::HasSubstr;

struct Case {
  const char* name;
  const char* source;
  const char* variables;  // JSON object
  const char* expected;
};

const Case kCases[] = {
    {"TextOnly", "plain text", R"json({})json", "plain text"},
    {"TrailingNewlineDropped", "a\n", R"json({})json", "a"},
    {"TrimBlocks", "{% if true %}\nyes\n{% endif %}\nend", R"json({})json", "yes\nend"},
    {"LstripBlocks", "  {% if true %}\n  x\n  {% endif %}\n  y", R"json({})json", "  x\n  y"},
    {"MinusStripsBothSides", "a  \n {%- if true -%}  \n b {%- endif %}", R"json({})json", "ab"},
    {"PlusKeepsIndentation", "  {%+ if true %}x{% endif %}", R"json({})json", "  x"},
    {"VariableTagsKeepWhitespace", "  {{ 'v' }}\n{{ 'w' }}  ", R"json({})json", "  v\nw  "},
    {"CommentsAreDropped", "a {# note #} b\n  {# alone #}\nc", R"json({})json", "a  b\nc"},
    {"IfElifElse",
     "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %},{% "
     "endfor %}",
     R"json({})json", "one,two,many,"},
    {"ForLoopVariables",
     "{% for x in 'abc' %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ "
     "loop.length }}{{ loop.revindex }};{% endfor %}",
     R"json({})json", "01TrueFalse33;12FalseFalse32;23FalseTrue31;"},
    {"ForElse", "{% for x in [] %}x{% else %}empty{% endfor %}", R"json({})json", "empty"},
    {"ForFilterCountsOnlyPassingItems",
     "{% for x in range(10) if x is odd %}{{ x }}{{ '/' if not loop.last }}{% endfor %} {{ 'n' }}",
     R"json({})json", "1/3/5/7/9 n"},
    {"ForUnpacksItems", "{% for k, v in {'a': 1, 'b': [2]}.items() %}{{ k }}={{ v }};{% endfor %}",
     R"json({})json", "a=1;b=[2];"},
    {"ForOverReversedSlice",
     "{% for m in messages[::-1] %}{{ m }}{% endfor %}|{{ messages[1:] }}|{{ messages[:-1] }}|{{ "
     "messages[-1] }}",
     R"json({"messages": [1, 2, 3]})json", "321|[2, 3]|[1, 2]|3"},
    {"BreakAndContinue",
     "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% "
     "endif %}{{ i }}{% endfor %}",
     R"json({})json", "0134"},
    {"LoopScopeDoesNotLeak",
     "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
     R"json({})json", "12121"},
    {"NamespaceCarriesStateOutOfLoops",
     "{% set ns = namespace(n=0, seen=[]) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% "
     "endfor %}{{ ns.n }}",
     R"json({})json", "6"},
    {"IfSharesScope", "{% if true %}{% set z = 3 %}{% endif %}{{ z }}", R"json({})json", "3"},
    {"SetTupleAndBlock",
     "{% set a, b = [1, 'two'] %}{% set block %}[{{ a }}-{{ b }}]{% endset %}{{ block }}{{ block | "
     "length }}",
     R"json({})json", "[1-two]7"},
    {"Macros",
     "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} "
     "{{ greet('Bo', punct='?') }} {{ greet() }}",
     R"json({})json", "Hi Ann! Hi Bo? Hi !"},
    {"NestedLoops",
     "{% for a in [1, 2] %}{% set outer = loop %}{% for b in 'xy' %}{{ outer.index }}{{ b }}{{ "
     "loop.index }} {% endfor %}{% endfor %}",
     R"json({})json", "1x1 1y2 2x1 2y2 "},
    {"Arithmetic",
     "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }} {{ (1 + 2) "
     "* 3 }} {{ 10 - 2 - 3 }} {{ 7.5 // 2 }} {{ -2 ** 2 }} {{ true + 1 }}",
     R"json({})json", "3 -4 2 3.5 1024 7 9 5 3.0 4 2"},
    {"StringOps",
     "{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ 'x' ~ 1 ~ none ~ true }} {{ [1] + [2] }} {{ 'abc'[1] }} {{ "
     "'héllo'[1:3] }} {{ 'abc'[::-1] }}",
     R"json({})json", "ab ababab x1NoneTrue [1, 2] b él cba"},
    {"Comparisons",
     "{{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' "
     "in 'abc' }} {{ 4 not in [1, 2] }} {{ 'k' in {'k': 1} }} {{ none == none }}",
     R"json({})json", "True True True True False True True True True"},
    {"AndOrReturnOperands",
     "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ none or [] }} {{ not 0 }} {{ not [1] }}",
     R"json({})json", "x b  [] True False"},
    {"Conditional",
     "{{ 'y' if 1 else 'n' }} {{ 'y' if 0 else 'n' }} [{{ 'y' if false }}] {{ 'a' if false else "
     "'b' if true else 'c' }}",
     R"json({})json", "y n [] b"},
    {"Tests",
     "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ none is none }} {{ 'a' is "
     "string }} {{ {} is mapping }} {{ [] is iterable }} {{ 3 is number }} {{ true is number }} {{ "
     "3 is integer }} {{ 3.0 is float }} {{ true is boolean }} {{ 4 is even }} {{ 9 is divisibleby "
     "3 }} {{ x is not none }} {{ 1 is eq 1 }} {{ false is false }} {{ 'A' is upper }}",
     R"json({"x": 1})json",
     "True False True True True True True True True True True True True True True True True True"},
    {"UndefinedIsEmptyAndFalse",
     "[{{ y }}] {{ y | length }} {{ 'set' if y else 'unset' }} {% for i in y %}never{% endfor %}{{ "
     "y | default('dflt') }} {{ d.missing | default('m') }} {{ l[9] is defined }}",
     R"json({"d": {}, "l": [1]})json", "[] 0 unset dflt m False"},
    {"PythonRepr",
     "{{ [1, 'a', none, true, 2.5, {'k': \"it's\"}] }} {{ {'a': [1]}.items() | list }} {{ (1,) }} "
     "{{ 1.0 }} {{ 1e16 }} {{ 0.0001 }} {{ 1e-05 }} {{ 1/3 }}",
     R"json({})json",
     "[1, 'a', None, True, 2.5, {'k': \"it's\"}] [('a', [1])] (1,) 1.0 1e+16 0.0001 1e-05 "
     "0.3333333333333333"},
    {"AttributeAndItemAccess",
     "{{ m.role }} {{ m['role'] }} {{ m.get('x', 'dx') }} {{ m.get('role') }} {{ m.keys() | list "
     "}} {{ m.values() | list }} {{ l.0 }}",
     R"json({"m": {"role": "user", "items": 5}, "l": ["zero"]})json",
     "user user dx user ['role', 'items'] ['user', 5] zero"},
    {"DictMethodWinsOverKeyForDot", "{{ m['items'] }} {{ m.items() | list }}",
     R"json({"m": {"items": 5}})json", "5 [('items', 5)]"},
    {"StringMethods",
     "{{ ' a b '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ "
     "'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b "
     "c'.rsplit(' ', 1) }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'Hi'.upper() }}{{ 'Hi'.lower() "
     "}}|{{ 'hello world'.title() }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) "
     "}}|{{ 'hello'.capitalize() }}|{{ 'héllo'.find('l') }}|{{ 'a-b'.count('-') }}|{{ "
     "'-'.join(['a', 'b']) }}",
     R"json({})json",
     "a b|a|a|a|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a b', 'c']|bba|HIhi|Hello "
     "World|TrueTrue|Hello|2|1|a-b"},
    {"Filters",
     "{{ '  x  ' | trim }}|{{ [1, 2, 3] | length }}|{{ 'héllo' | length }}|{{ [3, 4] | first }}{{ "
     "[3, 4] | last }}|{{ ['a', 'b'] | join(', ') }}|{{ 'ab' | upper }}{{ 'AB' | lower }}|{{ 'a-b' "
     "| replace('-', '+') }}|{{ 5 | string }}{{ '7' | int + 1 }}{{ 'x' | int }}{{ 2.7 | int }}|{{ "
     "[1, 2] | reverse | list }}|{{ 'ab' | list }}|{{ {'a': 1} | items | list }}|{{ 'hello "
     "big-world' | title }}|{{ -3 | abs }}|{{ 'ab\ncd' | indent(2) }}|{{ [1, none] | map('string') "
     "| join }}|{{ none | default('n', true) }}",
     R"json({})json",
     "x|3|5|34|a, b|ABab|a+b|5802|[2, 1]|['a', 'b']|[('a', 1)]|Hello Big-World|3|ab\n  cd|1None|n"},
    {"SelectAndMap",
     "{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }} {{ "
     "ms | rejectattr('role', 'eq', 'user') | list | length }} {{ [0, 1, 2] | select | list }} {{ "
     "[1, 2, 3] | reject('odd') | list }}",
     R"json({"ms": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}, {"role": "user", "content": "c"}]})json",
     "a,c 1 [1, 2] [2]"},
    {"ToJson",
     "{{ x | tojson }}\n{{ x | tojson(indent=2) }}\n{{ x | tojson(separators=(',', ':')) }} {{ x | "
     "tojson(sort_keys=true) }} {{ 'é\"\\n' | tojson }} {{ 'é' | tojson(ensure_ascii=true) }} {{ "
     "[1.0, 1e-05, 1e+20, 3] | tojson }}",
     R"json({"x": {"b": [1, {"c": null}], "a": "ü", "e": {}, "f": []}})json",
     "{\"b\": [1, {\"c\": null}], \"a\": \"ü\", \"e\": {}, \"f\": []}\n{\n  \"b\": [\n    1,\n    "
     "{\n      \"c\": null\n    }\n  ],\n  \"a\": \"ü\",\n  \"e\": {},\n  \"f\": "
     "[]\n}\n{\"b\":[1,{\"c\":null}],\"a\":\"ü\",\"e\":{},\"f\":[]} {\"a\": \"ü\", \"b\": [1, "
     "{\"c\": null}], \"e\": {}, \"f\": []} \"é\\\"\\n\" \"\\u00e9\" [1.0, 1e-05, 1e+20, 3]"},
    {"StringLiterals",
     "{{ 'a\\tb' }}|{{ \"q'\" }}|{{ 'x' 'y' }}|{{ '\\u00e9\\x41' }}|{{ 'back\\\\slash' }}|{{ '\\d' "
     "}}",
     R"json({})json", "a\tb|q'|xy|éA|back\\slash|\\d"},
    {"StrftimeNow", "{{ strftime_now('%Y-%m-%d %H:%M %A %b') }}", R"json({})json",
     "2026-01-15 09:30 Thursday Jan"},
    {"RangeForms", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }}",
     R"json({})json", "[0, 1, 2] [1, 3, 5] [3, 2, 1]"},
    {"GenerationTagRendersBody", "a{% generation %}b{% endgeneration %}c", R"json({})json", "abc"},
    {"InlineIfNoElseIsEmpty", "<{{ none if false }}>", R"json({})json", "<>"},
};

absl::StatusOr<std::string> RenderText(std::string_view source, const char* variables = "{}") {
  absl::StatusOr<Template> t = Template::Parse(source);
  if (!t.ok()) return t.status();
  ValueDict vars;
  const nlohmann::ordered_json json = nlohmann::ordered_json::parse(variables);
  for (const auto& [k, v] : json.items()) {
    vars.emplace_back(k, Value::FromJson(v));
  }
  RenderOptions options;
  options.now = [] {
    return absl::FromCivil(absl::CivilMinute(2026, 1, 15, 9, 30), absl::UTCTimeZone());
  };
  options.time_zone = absl::UTCTimeZone();
  return t->Render(vars, options);
}

class JinjaConstructTest : public ::testing::TestWithParam<Case> {};

TEST_P(JinjaConstructTest, RendersAsJinja2) {
  const Case& c = GetParam();
  absl::StatusOr<std::string> got = RenderText(c.source, c.variables);
  ASSERT_TRUE(got.ok()) << c.source << ": " << got.status();
  EXPECT_EQ(*got, c.expected) << c.source;
}

INSTANTIATE_TEST_SUITE_P(Constructs, JinjaConstructTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

void ExpectError(std::string_view source, absl::StatusCode code, std::string_view message,
                 const char* variables = "{}") {
  absl::StatusOr<std::string> got = RenderText(source, variables);
  ASSERT_FALSE(got.ok()) << source << " rendered " << *got;
  EXPECT_EQ(got.status().code(), code) << got.status();
  EXPECT_THAT(std::string(got.status().message()), HasSubstr(std::string(message)));
}

TEST(JinjaErrorTest, UnsupportedConstructsAreRefusedWithTheirLine) {
  ExpectError("a\n{{ x | frobnicate }}", absl::StatusCode::kUnimplemented,
              "line 2: the filter 'frobnicate' is not supported");
  ExpectError("a\nb\n{% include 'other.jinja' %}", absl::StatusCode::kUnimplemented,
              "line 3: {% include %} is not supported");
  ExpectError("{% if x is prime %}{% endif %}", absl::StatusCode::kUnimplemented,
              "line 1: the test 'prime' is not supported");
  ExpectError("\n{% for x in xs recursive %}{% endfor %}", absl::StatusCode::kUnimplemented,
              "line 2: a recursive for loop is not supported");
  ExpectError("{{ f(*args) }}", absl::StatusCode::kUnimplemented, "*args");
  ExpectError("{{ '%s' % 1 }}", absl::StatusCode::kUnimplemented, "printf-style");
  ExpectError("{{ 'é' | upper }}", absl::StatusCode::kUnimplemented, "U+00E9");
  ExpectError("\n\n{{ 'a'.zfill(3) }}", absl::StatusCode::kUnimplemented,
              "line 3: the method str.zfill()");
  ExpectError("{{ m.items }}", absl::StatusCode::kUnimplemented, "printing the function",
              R"({"m": {}})");
}

TEST(JinjaErrorTest, SyntaxErrorsNameTheLine) {
  ExpectError("{% if x %}\nno end", absl::StatusCode::kInvalidArgument,
              "unexpected end of template: expected {% elif %} or {% else %} or {% endif %}");
  ExpectError("a\n{{ 'abc }}", absl::StatusCode::kInvalidArgument,
              "line 2: string literal is never closed");
  ExpectError("{{ (1 }}", absl::StatusCode::kInvalidArgument, "line 1:");
  ExpectError("{% frobnicate %}", absl::StatusCode::kInvalidArgument,
              "line 1: unknown statement {% frobnicate %}");
  ExpectError("{% break %}", absl::StatusCode::kInvalidArgument, "'break' outside of a for loop");
  ExpectError("x\n{{ a b }}", absl::StatusCode::kInvalidArgument, "line 2: expected '}}', got 'b'");
}

TEST(JinjaErrorTest, RuntimeErrorsNameTheLine) {
  ExpectError("line one\n{{ 'a' + 1 }}", absl::StatusCode::kInvalidArgument,
              "line 2: can only concatenate str (not \"int\") to str");
  ExpectError("\n\n{{ a.b.c }}", absl::StatusCode::kInvalidArgument,
              "line 3: 'dict object' has no attribute 'b'", R"({"a": {}})");
  ExpectError("{{ missing + 1 }}", absl::StatusCode::kInvalidArgument, "'missing' is undefined");
  ExpectError("{% set x = 1 %}\n{% set x.y = 2 %}", absl::StatusCode::kInvalidArgument,
              "line 2: cannot assign attribute on non-namespace object 'x'");
  ExpectError("{{ 1 // 0 }}", absl::StatusCode::kInvalidArgument, "division or modulo by zero");
  ExpectError("{{ 1 < 'a' }}", absl::StatusCode::kInvalidArgument,
              "'<' not supported between instances of 'int' and 'str'");
  ExpectError("{{ 9223372036854775807 + 1 }}", absl::StatusCode::kOutOfRange, "integer overflow");
  ExpectError("{{ undefined_value | tojson }}", absl::StatusCode::kInvalidArgument,
              "line 1: filter 'tojson': tojson: Object of type Undefined is not JSON serializable");
  ExpectError("{% for a, b in [[1, 2, 3]] %}{% endfor %}", absl::StatusCode::kInvalidArgument,
              "cannot unpack 3 values into 2 names");
}

// A template is outside input (a model repository's): 100,000 nested parentheses, lists or
// blocks, or a macro calling itself, once overflowed the stack (found by
// fuzz/chat_template_fuzzer.cc). Now each is an error; 128 levels still parse.
TEST(JinjaErrorTest, NestingAndRecursionAreBounded) {
  const auto repeat = [](std::string_view s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  for (const std::string& source :
       {StrCat("{{ ", repeat("(", 100000), "1", repeat(")", 100000), " }}"),
        StrCat("{{ ", repeat("[", 100000), repeat("]", 100000), " }}"),
        StrCat("{{ ", repeat("-", 100000), "1 }}"),
        StrCat(repeat("{% if true %}", 20000), "x", repeat("{% endif %}", 20000))}) {
    ExpectError(source, absl::StatusCode::kInvalidArgument, "line 1: nested deeper than 128");
  }
  absl::StatusOr<std::string> deep =
      RenderText(StrCat("{{ ", repeat("(", 100), "1", repeat(")", 100), " }}"));
  ASSERT_TRUE(deep.ok()) << deep.status();
  EXPECT_EQ(*deep, "1");
  ExpectError("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
              absl::StatusCode::kInvalidArgument, "macro 'f': calls nested 64 deep");
  absl::StatusOr<std::string> counted = RenderText(
      "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ f(20) }}");
  ASSERT_TRUE(counted.ok()) << counted.status();
  EXPECT_EQ(*counted, "01234567891011121314151617181920");
}

TEST(JinjaErrorTest, RaiseExceptionFailsTheRenderWithItsMessage) {
  ExpectError(
      "{% if messages | length == 0 %}\n{{ raise_exception('No messages given') }}\n"
      "{% endif %}",
      absl::StatusCode::kInvalidArgument, "line 2: raise_exception: No messages given",
      R"({"messages": []})");
}

TEST(JinjaTemplateTest, VariablesShadowBuiltinGlobals) {
  absl::StatusOr<std::string> got = RenderText("{{ range }}", R"({"range": "mine"})");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "mine");
}

TEST(JinjaTemplateTest, MacrosSeeLaterTopLevelAssignments) {
  absl::StatusOr<std::string> got =
      RenderText("{% macro m() %}{{ v }}{% endmacro %}{% set v = 'late' %}{{ m() }}");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "late");
}

// A macro holds the scope it was defined in, and that scope holds the macro; a namespace can hold
// itself. Each render of such a template once leaked its scopes, and with them every variable it
// was given (found by fuzz/chat_template_fuzzer.cc with LeakSanitizer).
TEST(JinjaTemplateTest, ARenderKeepsNothingAliveAfterItReturns) {
  for (const char* source :
       {"{% macro m() %}x{% endmacro %}{{ m() }}",
        "{% for i in [1] %}{% macro inner() %}{{ i }}{% endmacro %}{{ inner() }}{% endfor %}",
        "{% set ns = namespace(p=probe) %}{% set ns.self = ns %}{{ ns.p() }}",
        "{% macro m() %}{{ ns }}{% endmacro %}{% set ns = namespace(f=m) %}{{ 1 }}"}) {
    auto sentinel = std::make_shared<int>(0);
    std::weak_ptr<int> watch = sentinel;
    {
      ValueDict variables = {
          {"probe", Value::Function("probe", [sentinel](CallArgs) -> absl::StatusOr<Value> {
             return Value::String("p");
           })}};
      sentinel.reset();
      absl::StatusOr<Template> t = Template::Parse(source);
      ASSERT_TRUE(t.ok()) << source << ": " << t.status();
      absl::StatusOr<std::string> got = t->Render(variables);
      ASSERT_TRUE(got.ok()) << source << ": " << got.status();
    }
    EXPECT_TRUE(watch.expired()) << source;
  }
}

}  // namespace
}  // namespace flywheel::jinja
