// Python's str methods over UTF-8 text. Python indexes strings by code point, strips Unicode
// whitespace and splits on it, so `content[:10]`, `|length` and `.strip()` must count and cut
// code points, not bytes, for a chat template to render as it does in transformers.
//
// Case mapping is ASCII only: Python maps every cased script, which needs Unicode's tables.
// A letter outside ASCII that has a case (Latin, Greek, Cyrillic, …) is an error rather than a
// silently different result; uncased text (CJK, emoji, punctuation) passes through.
#ifndef FLYWHEEL_CHAT_PYTHON_STRING_H_
#define FLYWHEEL_CHAT_PYTHON_STRING_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel::jinja {

// UTF-8 ⇄ code points. Invalid bytes decode as U+FFFD (inputs come from parsed JSON, valid).
std::u32string DecodeUtf8(std::string_view text);
std::string EncodeUtf8(std::u32string_view code_points);
void AppendUtf8(char32_t c, std::string& out);

// len(s): the number of code points.
int64_t CodePointLength(std::string_view text);

// str.isspace() for one code point (the set Python's str.strip() and str.split() use).
bool IsPythonWhitespace(char32_t c);

// Python slice s[start:stop:step] over `length` items: the indices it selects, in order.
// step 0 is Python's ValueError.
absl::StatusOr<std::vector<int64_t>> SliceIndices(int64_t length, std::optional<int64_t> start,
                                                  std::optional<int64_t> stop,
                                                  std::optional<int64_t> step);

// str.strip/lstrip/rstrip: `chars` absent strips whitespace.
std::string PyStrip(std::string_view text, const std::optional<std::string>& chars, bool left,
                    bool right);

// str.split(sep, maxsplit) and str.rsplit: sep absent splits on whitespace runs and drops empty
// pieces; an empty sep is Python's ValueError.
absl::StatusOr<std::vector<std::string>> PySplit(std::string_view text,
                                                 const std::optional<std::string>& sep,
                                                 int64_t maxsplit, bool from_right);

// str.replace(old, new, count); count < 0 replaces all. An empty `old` inserts `new` between
// code points, as Python does.
std::string PyReplace(std::string_view text, std::string_view old_text, std::string_view new_text,
                      int64_t count);

// str.upper/lower/title/capitalize; errors name the first cased non-ASCII code point.
absl::StatusOr<std::string> PyUpper(std::string_view text);
absl::StatusOr<std::string> PyLower(std::string_view text);
absl::StatusOr<std::string> PyTitle(std::string_view text);
absl::StatusOr<std::string> PyCapitalize(std::string_view text);

}  // namespace flywheel::jinja

#endif  // FLYWHEEL_CHAT_PYTHON_STRING_H_
