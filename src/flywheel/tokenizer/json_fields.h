// Reading tokenizer.json objects strictly: every key is either understood or refused, and every
// error names its JSON path ("model.merges[12]", "pre_tokenizer.pretokenizers[0].behavior").
#ifndef FLYWHEEL_TOKENIZER_JSON_FIELDS_H_
#define FLYWHEEL_TOKENIZER_JSON_FIELDS_H_

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flywheel::tokenizer_json {

// The value at `path` as text for messages, shortened to `limit` characters.
std::string Brief(const nlohmann::json& value, size_t limit = 80);

// object[key] without copying it, or `fallback` (null by default) when absent. A conditional
// `object.contains(key) ? object[key] : nlohmann::json()` copies the value, recursively, so a
// file nested deep enough overflowed the stack.
const nlohmann::json& FieldOr(const nlohmann::json& object, std::string_view key,
                              const nlohmann::json& fallback);
const nlohmann::json& FieldOrNull(const nlohmann::json& object, std::string_view key);
// object[key] when `object` is an object and the value a string, else `fallback`. nlohmann's
// value(key, "") throws type_error when the value is there but not a string, which ended the
// process loading such a file.
std::string StringOr(const nlohmann::json& object, std::string_view key,
                     std::string_view fallback = "");

// OK when `object` is a JSON object whose keys are all in `known`; otherwise an error naming
// `path`.key of the first unknown key.
absl::Status CheckKeys(const nlohmann::json& object, std::string_view path,
                       std::initializer_list<std::string_view> known);

// object[key] when present and of the given kind; missing or null gives `fallback`.
absl::StatusOr<bool> OptionalBool(const nlohmann::json& object, std::string_view path,
                                  std::string_view key, bool fallback);
absl::StatusOr<std::string> RequiredString(const nlohmann::json& object, std::string_view path,
                                           std::string_view key);

// "path.key", or "key" when path is empty.
std::string Join(std::string_view path, std::string_view key);
std::string Index(std::string_view path, size_t i);  // "path[i]"

absl::Status Unsupported(std::string_view path, const nlohmann::json& value, std::string_view what);

}  // namespace flywheel::tokenizer_json

#endif  // FLYWHEEL_TOKENIZER_JSON_FIELDS_H_
