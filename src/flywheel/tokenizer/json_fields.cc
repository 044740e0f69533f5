#include "flywheel/tokenizer/json_fields.h"

#include "flywheel/core/strings.h"

namespace flywheel::tokenizer_json {

namespace {

// Containers nested deeper than this print as […] / {…}. nlohmann's dump() recurses once per
// level, and a tokenizer.json can nest deep enough (a million '[' in 2 MB) to overflow the stack.
constexpr int kMaxBriefDepth = 16;

std::string Scalar(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Appends `value` as compact JSON until `out` is longer than `limit`.
void BriefInto(const nlohmann::json& value, int depth, size_t limit, std::string& out) {
  if (!value.is_structured()) {
    out += Scalar(value);
    return;
  }
  const bool array = value.is_array();
  if (value.empty() || depth >= kMaxBriefDepth) {
    out += value.empty() ? (array ? "[]" : "{}") : (array ? "[…]" : "{…}");
    return;
  }
  out += array ? '[' : '{';
  bool first = true;
  for (auto it = value.begin(); it != value.end() && out.size() <= limit; ++it) {
    if (!first) out += ',';
    first = false;
    if (!array) out += Scalar(nlohmann::json(it.key())) + ":";
    BriefInto(it.value(), depth + 1, limit, out);
  }
  out += array ? ']' : '}';
}

}  // namespace

std::string Brief(const nlohmann::json& value, size_t limit) {
  std::string text;
  BriefInto(value, 0, limit, text);
  if (text.size() > limit) text = text.substr(0, limit) + "…";
  return text;
}

const nlohmann::json& FieldOr(const nlohmann::json& object, std::string_view key,
                              const nlohmann::json& fallback) {
  if (!object.is_object()) return fallback;
  const auto it = object.find(key);
  return it == object.end() ? fallback : *it;
}

const nlohmann::json& FieldOrNull(const nlohmann::json& object, std::string_view key) {
  static const nlohmann::json* const kNull = new nlohmann::json();
  return FieldOr(object, key, *kNull);
}

std::string StringOr(const nlohmann::json& object, std::string_view key,
                     std::string_view fallback) {
  const nlohmann::json& value = FieldOrNull(object, key);
  return value.is_string() ? value.get<std::string>() : std::string(fallback);
}

std::string Join(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : StrCat(path, ".", key);
}

std::string Index(std::string_view path, size_t i) { return StrCat(path, "[", i, "]"); }

absl::Status Unsupported(std::string_view path, const nlohmann::json& value,
                         std::string_view what) {
  return absl::UnimplementedError(StrCat(path, " = ", Brief(value), ": ", what));
}

absl::Status CheckKeys(const nlohmann::json& object, std::string_view path,
                       std::initializer_list<std::string_view> known) {
  if (!object.is_object()) {
    return absl::InvalidArgumentError(
        StrCat(path.empty() ? "the file" : path, " must be a JSON object, not ", Brief(object)));
  }
  for (const auto& [key, value] : object.items()) {
    bool found = false;
    for (std::string_view k : known) found = found || k == key;
    if (!found) {
      return Unsupported(
          Join(path, key), value,
          StrCat("not supported (understood keys: ", flywheel::Join(known, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> OptionalBool(const nlohmann::json& object, std::string_view path,
                                  std::string_view key, bool fallback) {
  const std::string k(key);
  if (!object.contains(k) || object[k].is_null()) return fallback;
  if (!object[k].is_boolean()) {
    return absl::InvalidArgumentError(
        StrCat(Join(path, key), " = ", Brief(object[k]), ": must be true or false"));
  }
  return object[k].get<bool>();
}

absl::StatusOr<std::string> RequiredString(const nlohmann::json& object, std::string_view path,
                                           std::string_view key) {
  const std::string k(key);
  if (!object.contains(k) || !object[k].is_string()) {
    return absl::InvalidArgumentError(
        StrCat(Join(path, key), ": a string is required",
               object.contains(k) ? StrCat(", not ", Brief(object[k])) : std::string()));
  }
  return object[k].get<std::string>();
}

}  // namespace flywheel::tokenizer_json
