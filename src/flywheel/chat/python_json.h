// Python's json.dumps over template values, which is what transformers' `tojson` filter calls
// (json.dumps(x, ensure_ascii=False, indent=…, separators=…, sort_keys=…)): ", " and ": "
// separators without indent, insertion order of keys, floats as Python's repr ("1e-05", "1.0"),
// NaN and Infinity as Python writes them. nlohmann's dump differs in all of these (and its
// default object type sorts keys), so tojson cannot use it.
#ifndef FLYWHEEL_CHAT_PYTHON_JSON_H_
#define FLYWHEEL_CHAT_PYTHON_JSON_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/chat/jinja_value.h"

namespace flywheel::jinja {

struct JsonDumpsOptions {
  bool ensure_ascii = false;          // transformers' default (Python's is True)
  std::optional<std::string> indent;  // None: one line; "" or "  ": newlines and this prefix
  std::optional<std::string> item_separator;  // default ", " (one line) or "," (indented)
  std::optional<std::string> key_separator;   // default ": "
  bool sort_keys = false;
};

// Undefined values, namespaces and functions are the TypeError json.dumps raises.
absl::StatusOr<std::string> PythonJsonDumps(const Value& value, const JsonDumpsOptions& options);

}  // namespace flywheel::jinja

#endif  // FLYWHEEL_CHAT_PYTHON_JSON_H_
