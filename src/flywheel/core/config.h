// TOML configuration bound to typed Options structs.
//
// Each Options struct declares its fields once, and that one declaration drives reading,
// checking for unknown keys and printing the effective config:
//
//   struct LearnerOptions {
//     double lr = 3e-4;
//     template <typename V> void VisitFields(V& v) {
//       v.Field("lr", lr, "AdamW learning rate");
//     }
//     absl::Status Validate() const;
//   };
//
// Sections nest with v.Section("schedule", schedule). Enumerations are bound through a name
// table with v.Choice("mode", mode, kModeNames, "…"). An unknown key is an error naming the
// file, the key path and the closest known key ("did you mean learner.lr?").
#ifndef FLYWHEEL_CORE_CONFIG_H_
#define FLYWHEEL_CORE_CONFIG_H_

#include <cstdint>
#include <limits>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/core/strings.h"

#define TOML_EXCEPTIONS 1
#include <toml++/toml.h>

namespace flywheel::config {

template <typename E>
struct ChoiceName {
  std::string_view name;
  E value;
};

// Parses TOML text; a syntax error names source, line and column.
absl::StatusOr<toml::table> ParseToml(std::string_view text, std::string_view source);
absl::StatusOr<toml::table> ParseTomlFile(const std::string& path);

// Applies one "--set a.b.c=value" override. The value is read as a TOML value when it parses as
// one (3e-4, true, [1, 2], "x") and as a bare string otherwise (--set run.name=exp1).
absl::Status ApplyOverride(toml::table& table, std::string_view assignment);

// The known key closest to `key` among `candidates`, or "" if none is close enough.
std::string ClosestKey(std::string_view key, std::span<const std::string> candidates);

namespace internal {
std::string NodeTypeName(const toml::node& node);
std::string FormatLocation(std::string_view source, const toml::node& node);
}  // namespace internal

// Collects the full dotted path of every field; used for suggestions across sections.
class KeyCollector {
 public:
  explicit KeyCollector(std::string prefix = "") : prefix_(std::move(prefix)) {}
  template <typename T>
  void Field(std::string_view key, T&, std::string_view = {}) {
    keys_.push_back(Path(key));
  }
  template <typename E, size_t N>
  void Choice(std::string_view key, E&, const ChoiceName<E> (&)[N], std::string_view = {}) {
    keys_.push_back(Path(key));
  }
  template <typename S>
  void Section(std::string_view key, S& section) {
    KeyCollector inner(Path(key));
    section.VisitFields(inner);
    keys_.insert(keys_.end(), inner.keys_.begin(), inner.keys_.end());
  }
  const std::vector<std::string>& keys() const { return keys_; }

 private:
  std::string Path(std::string_view key) const {
    return prefix_.empty() ? std::string(key) : StrCat(prefix_, ".", key);
  }
  std::string prefix_;
  std::vector<std::string> keys_;
};

// Reads a TOML table into an Options struct, recording every error.
class Reader {
 public:
  Reader(const toml::table& table, std::string_view source, std::string prefix,
         const std::vector<std::string>* all_keys)
      : table_(table), source_(source), prefix_(std::move(prefix)), all_keys_(all_keys) {}

  template <typename T>
  void Field(std::string_view key, T& value, std::string_view = {}) {
    local_keys_.emplace_back(key);
    const toml::node* node = table_.get(key);
    if (node == nullptr) return;
    Convert(*node, Path(key), value);
  }

  template <typename E, size_t N>
  void Choice(std::string_view key, E& value, const ChoiceName<E> (&names)[N],
              std::string_view = {}) {
    local_keys_.emplace_back(key);
    const toml::node* node = table_.get(key);
    if (node == nullptr) return;
    std::vector<std::string> allowed;
    for (const auto& n : names) allowed.emplace_back(n.name);
    if (const auto* s = node->as_string()) {
      for (const auto& n : names) {
        if (n.name == s->get()) {
          value = n.value;
          return;
        }
      }
      Error(*node, StrCat("key ", Path(key), ": unknown value \"", s->get(),
                                "\" (expected one of: ", Join(allowed, ", "), ")"));
      return;
    }
    TypeError(*node, Path(key), StrCat("a string, one of ", Join(allowed, ", ")));
  }

  template <typename S>
  void Section(std::string_view key, S& section) {
    local_keys_.emplace_back(key);
    const toml::node* node = table_.get(key);
    if (node == nullptr) return;
    const toml::table* inner = node->as_table();
    if (inner == nullptr) {
      TypeError(*node, Path(key), "a table (section)");
      return;
    }
    Reader reader(*inner, source_, Path(key), all_keys_);
    section.VisitFields(reader);
    reader.CheckUnknownKeys();
    errors_.insert(errors_.end(), reader.errors_.begin(), reader.errors_.end());
  }

  // Reports every key of this table that no field claimed.
  void CheckUnknownKeys();

  absl::Status status() const;

 private:
  std::string Path(std::string_view key) const {
    return prefix_.empty() ? std::string(key) : StrCat(prefix_, ".", key);
  }
  void Error(const toml::node& node, std::string message) {
    errors_.push_back(StrCat(internal::FormatLocation(source_, node), message));
  }
  void TypeError(const toml::node& node, const std::string& path, std::string_view expected) {
    Error(node, StrCat("key ", path, ": expected ", expected, ", got ",
                             internal::NodeTypeName(node)));
  }

  void Convert(const toml::node& node, const std::string& path, bool& out) {
    if (const auto* b = node.as_boolean()) {
      out = b->get();
    } else {
      TypeError(node, path, "a boolean");
    }
  }
  void Convert(const toml::node& node, const std::string& path, std::string& out) {
    if (const auto* s = node.as_string()) {
      out = s->get();
    } else {
      TypeError(node, path, "a string");
    }
  }
  template <typename T>
    requires std::is_integral_v<T>
  void Convert(const toml::node& node, const std::string& path, T& out) {
    const auto* i = node.as_integer();
    if (i == nullptr) {
      TypeError(node, path, "an integer");
      return;
    }
    const int64_t v = i->get();
    if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        (v > 0 && static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
      Error(node, StrCat("key ", path, ": ", v, " is out of range"));
      return;
    }
    out = static_cast<T>(v);
  }
  template <typename T>
    requires std::is_floating_point_v<T>
  void Convert(const toml::node& node, const std::string& path, T& out) {
    if (const auto* f = node.as_floating_point()) {
      out = static_cast<T>(f->get());
    } else if (const auto* i = node.as_integer()) {
      out = static_cast<T>(i->get());
    } else {
      TypeError(node, path, "a number");
    }
  }
  template <typename T>
  void Convert(const toml::node& node, const std::string& path, std::vector<T>& out) {
    const auto* array = node.as_array();
    if (array == nullptr) {
      TypeError(node, path, "an array");
      return;
    }
    std::vector<T> values(array->size());
    const size_t before = errors_.size();
    for (size_t i = 0; i < array->size(); ++i) {
      Convert(*array->get(i), StrCat(path, "[", i, "]"), values[i]);
    }
    if (errors_.size() == before) out = std::move(values);
  }

  const toml::table& table_;
  std::string_view source_;
  std::string prefix_;
  const std::vector<std::string>* all_keys_;
  std::vector<std::string> local_keys_;
  std::vector<std::string> errors_;
};

// Writes an Options struct as TOML text, one commented line per field.
class Writer {
 public:
  explicit Writer(std::string prefix = "") : prefix_(std::move(prefix)) {}

  template <typename T>
  void Field(std::string_view key, const T& value, std::string_view doc = {}) {
    Line(key, FormatValue(value), doc);
  }
  template <typename E, size_t N>
  void Choice(std::string_view key, const E& value, const ChoiceName<E> (&names)[N],
              std::string_view doc = {}) {
    std::string name = "?";
    std::vector<std::string> allowed;
    for (const auto& n : names) {
      allowed.emplace_back(n.name);
      if (n.value == value) name = std::string(n.name);
    }
    Line(key, FormatValue(name),
         StrCat(doc, doc.empty() ? "" : " ", "(", Join(allowed, " | "), ")"));
  }
  template <typename S>
  void Section(std::string_view key, const S& section) {
    Writer inner(prefix_.empty() ? std::string(key) : StrCat(prefix_, ".", key));
    const_cast<S&>(section).VisitFields(inner);  // visiting does not modify when writing
    sections_.push_back(inner.Text());
  }

  std::string Text() const;

 private:
  void Line(std::string_view key, const std::string& value, std::string_view doc);
  template <typename T>
  static std::string FormatValue(const T& value) {
    std::ostringstream os;
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string>) {
      os << toml::value<T>(value);
    } else if constexpr (std::is_integral_v<T>) {
      os << toml::value<int64_t>(static_cast<int64_t>(value));
    } else if constexpr (std::is_floating_point_v<T>) {
      // Shortest round-trip form (1e-05, not 1.0000000000000001e-05), kept a TOML float.
      std::string text = fmt::format("{}", static_cast<double>(value));
      if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
      os << text;
    } else {  // std::vector<U>
      toml::array array;
      for (const auto& v : value) {
        if constexpr (std::is_integral_v<typename T::value_type>) {
          array.push_back(static_cast<int64_t>(v));
        } else {
          array.push_back(v);
        }
      }
      os << array;
    }
    return os.str();
  }

  std::string prefix_;
  std::vector<std::string> lines_;
  std::vector<std::string> sections_;
};

// Binds `table` (read from `source`, a file name or "--set") into `options`, then validates.
template <typename Options>
absl::Status Bind(const toml::table& table, std::string_view source, Options& options) {
  KeyCollector collector;
  options.VisitFields(collector);
  Reader reader(table, source, "", &collector.keys());
  options.VisitFields(reader);
  reader.CheckUnknownKeys();
  return reader.status();
}

template <typename Options>
std::string Format(const Options& options) {
  Writer writer;
  const_cast<Options&>(options).VisitFields(writer);
  return writer.Text();
}

}  // namespace flywheel::config

#endif  // FLYWHEEL_CORE_CONFIG_H_
