// Python's semantics that the renderer must reproduce: float repr, json.dumps, slicing, str
// methods over code points.
#include "flywheel/chat/jinja_value.h"

#include "flywheel/chat/python_json.h"
#include "flywheel/chat/python_string.h"
#include "gtest/gtest.h"

namespace flywheel::jinja {
namespace {

TEST(PythonFloatReprTest, MatchesPythonRepr) {
  // Values and repr() as CPython prints them.
  EXPECT_EQ(PythonFloatRepr(1.0), "1.0");
  EXPECT_EQ(PythonFloatRepr(0.1), "0.1");
  EXPECT_EQ(PythonFloatRepr(-2.5), "-2.5");
  EXPECT_EQ(PythonFloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(PythonFloatRepr(1e16), "1e+16");
  EXPECT_EQ(PythonFloatRepr(0.0001), "0.0001");
  EXPECT_EQ(PythonFloatRepr(1e-05), "1e-05");
  EXPECT_EQ(PythonFloatRepr(1.5e-10), "1.5e-10");
  EXPECT_EQ(PythonFloatRepr(1e300), "1e+300");
  EXPECT_EQ(PythonFloatRepr(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(PythonFloatRepr(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(PythonFloatRepr(0.0), "0.0");
  EXPECT_EQ(PythonFloatRepr(-0.0), "-0.0");
}

TEST(PythonJsonDumpsTest, SeparatorsIndentAndEscapesAsPython) {
  const Value v = Value::FromJson(nlohmann::ordered_json::parse(
      R"({"z": [1, 2.0, null, true], "a": "é\n\"\u0001", "e": {}, "l": []})"));
  absl::StatusOr<std::string> flat = PythonJsonDumps(v, {});
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(*flat, R"({"z": [1, 2.0, null, true], "a": "é\n\"\u0001", "e": {}, "l": []})");
  JsonDumpsOptions indented;
  indented.indent = " ";
  indented.sort_keys = true;
  absl::StatusOr<std::string> pretty = PythonJsonDumps(v, indented);
  ASSERT_TRUE(pretty.ok());
  EXPECT_EQ(*pretty,
            "{\n \"a\": \"é\\n\\\"\\u0001\",\n \"e\": {},\n \"l\": [],\n \"z\": [\n  1,\n  "
            "2.0,\n  null,\n  true\n ]\n}");
  JsonDumpsOptions ascii;
  ascii.ensure_ascii = true;
  absl::StatusOr<std::string> escaped = PythonJsonDumps(Value::String("é😀"), ascii);
  ASSERT_TRUE(escaped.ok());
  EXPECT_EQ(*escaped, R"("\u00e9\ud83d\ude00")");
}

TEST(PythonStringTest, SlicesCountCodePoints) {
  absl::StatusOr<std::vector<int64_t>> idx = SliceIndices(5, std::nullopt, std::nullopt, -1);
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(*idx, (std::vector<int64_t>{4, 3, 2, 1, 0}));
  idx = SliceIndices(5, -2, std::nullopt, std::nullopt);
  EXPECT_EQ(*idx, (std::vector<int64_t>{3, 4}));
  idx = SliceIndices(5, 10, -10, -2);
  EXPECT_EQ(*idx, (std::vector<int64_t>{4, 2, 0}));
  EXPECT_FALSE(SliceIndices(5, std::nullopt, std::nullopt, 0).ok());
  EXPECT_EQ(CodePointLength("héllo 😀"), 7);
}

TEST(PythonStringTest, StripAndSplitUseUnicodeWhitespace) {
  EXPECT_EQ(PyStrip("\u3000 x \u00a0\n", std::nullopt, true, true), "x");
  EXPECT_EQ(PyStrip("xxaxx", std::string("x"), true, false), "axx");
  absl::StatusOr<std::vector<std::string>> parts =
      PySplit(" a\u2003b  c ", std::nullopt, -1, false);
  ASSERT_TRUE(parts.ok());
  EXPECT_EQ(*parts, (std::vector<std::string>{"a", "b", "c"}));
  parts = PySplit("a b c", std::nullopt, 1, true);
  EXPECT_EQ(*parts, (std::vector<std::string>{"a b", "c"}));
  parts = PySplit("a,,b", std::string(","), -1, false);
  EXPECT_EQ(*parts, (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(PyReplace("abc", "", "-", -1), "-a-b-c-");
  EXPECT_EQ(*PyTitle("they're 日本x"), "They'Re 日本X");
  EXPECT_FALSE(PyUpper("straße").ok());  // Python would write STRASSE: refused, not guessed
}

TEST(ValueTest, EqualityAndTruthinessFollowPython) {
  EXPECT_TRUE(Equals(Value::Int(1), Value::Float(1.0)));
  EXPECT_TRUE(Equals(Value::Bool(true), Value::Int(1)));
  EXPECT_FALSE(Equals(Value::String("1"), Value::Int(1)));
  EXPECT_FALSE(Equals(Value::List({Value::Int(1)}), Value::List({Value::Int(1)}, true)));
  EXPECT_TRUE(Equals(Value::FromJson({{"a", 1}, {"b", 2}}), Value::FromJson({{"b", 2}, {"a", 1}})));
  EXPECT_FALSE(Truthy(Value::Undefined()));
  EXPECT_FALSE(Truthy(Value::Float(0.0)));
  EXPECT_TRUE(Truthy(Value::String(" ")));
  EXPECT_FALSE(LessThan(Value::Int(1), Value::String("a")).ok());
  EXPECT_EQ(*ToPythonRepr(Value::String("it's")), "\"it's\"");
  EXPECT_EQ(*ToPythonRepr(Value::String("a\tb\x01")), "'a\\tb\\x01'");
}

}  // namespace
}  // namespace flywheel::jinja
