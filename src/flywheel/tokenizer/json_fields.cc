#include "flywheel/tokenizer/json_fields.h"

#include "flywheel/core/strings.h"

namespace flywheel::tokenizer_json {

std::string Brief(const nlohmann::json& value, size_t limit) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > limit) text = text.substr(0, limit) + "…";
  return text;
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
