#include "flywheel/chat/python_json.h"

#include <algorithm>
#include <cmath>

#include "flywheel/chat/python_string.h"
#include "flywheel/core/strings.h"

namespace flywheel::jinja {
namespace {

void AppendJsonString(const std::string& s, bool ensure_ascii, std::string& out) {
  out.push_back('"');
  for (char32_t c : DecodeUtf8(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
          if (c > 0xFFFF) {  // a surrogate pair, as Python writes it
            const char32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<uint32_t>(0xD800 + (v >> 10)),
                               static_cast<uint32_t>(0xDC00 + (v & 0x3FF)));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
          }
        } else {
          AppendUtf8(c, out);
        }
    }
  }
  out.push_back('"');
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpsOptions& options) : options_(options) {
    item_separator_ = options.item_separator.value_or(options.indent.has_value() ? "," : ", ");
    key_separator_ = options.key_separator.value_or(": ");
  }

  absl::Status Dump(const Value& v, int level, std::string& out) {
    switch (v.kind()) {
      case Value::Kind::kNone:
        out += "null";
        return absl::OkStatus();
      case Value::Kind::kBool:
        out += v.as_bool() ? "true" : "false";
        return absl::OkStatus();
      case Value::Kind::kInt:
        out += std::to_string(v.as_int());
        return absl::OkStatus();
      case Value::Kind::kFloat: {
        const double d = v.as_float();
        if (std::isnan(d)) {
          out += "NaN";
        } else if (std::isinf(d)) {
          out += d > 0 ? "Infinity" : "-Infinity";
        } else {
          out += PythonFloatRepr(d);
        }
        return absl::OkStatus();
      }
      case Value::Kind::kString:
        AppendJsonString(v.as_string(), options_.ensure_ascii, out);
        return absl::OkStatus();
      case Value::Kind::kList: {
        const ValueList& items = v.as_list();
        if (items.empty()) {
          out += "[]";
          return absl::OkStatus();
        }
        out.push_back('[');
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out += item_separator_;
          NewLine(level + 1, out);
          if (absl::Status s = Dump(items[i], level + 1, out); !s.ok()) return s;
        }
        NewLine(level, out);
        out.push_back(']');
        return absl::OkStatus();
      }
      case Value::Kind::kDict: {
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& item : v.as_dict()) items.push_back(&item);
        if (items.empty()) {
          out += "{}";
          return absl::OkStatus();
        }
        if (options_.sort_keys) {
          std::stable_sort(items.begin(), items.end(),
                           [](const auto* a, const auto* b) { return a->first < b->first; });
        }
        out.push_back('{');
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out += item_separator_;
          NewLine(level + 1, out);
          AppendJsonString(items[i]->first, options_.ensure_ascii, out);
          out += key_separator_;
          if (absl::Status s = Dump(items[i]->second, level + 1, out); !s.ok()) return s;
        }
        NewLine(level, out);
        out.push_back('}');
        return absl::OkStatus();
      }
      case Value::Kind::kUndefined:
        return absl::InvalidArgumentError(
            StrCat("tojson: Object of type Undefined is not JSON serializable",
                   v.undefined_hint().empty() ? "" : " (", v.undefined_hint(),
                   v.undefined_hint().empty() ? "" : ")"));
      default:
        return absl::InvalidArgumentError(
            StrCat("tojson: Object of type ", v.TypeName(), " is not JSON serializable"));
    }
  }

 private:
  void NewLine(int level, std::string& out) const {
    if (!options_.indent.has_value()) return;
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *options_.indent;
  }

  const JsonDumpsOptions& options_;
  std::string item_separator_;
  std::string key_separator_;
};

}  // namespace

absl::StatusOr<std::string> PythonJsonDumps(const Value& value, const JsonDumpsOptions& options) {
  std::string out;
  Dumper dumper(options);
  if (absl::Status s = dumper.Dump(value, 0, out); !s.ok()) return s;
  return out;
}

}  // namespace flywheel::jinja
