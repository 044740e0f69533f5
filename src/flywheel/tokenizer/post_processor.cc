#include "flywheel/tokenizer/post_processor.h"

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/tokenizer/json_fields.h"

namespace flywheel {
namespace {

namespace tj = tokenizer_json;

absl::Status ParseTemplate(const nlohmann::json& json, const std::string& path,
                           SingleSequenceTemplate* out) {
  RETURN_IF_ERROR(tj::CheckKeys(json, path, {"type", "single", "pair", "special_tokens"}));
  const std::string single_path = tj::Join(path, "single");
  if (!json.contains("single") || !json["single"].is_array()) {
    return absl::InvalidArgumentError(StrCat(single_path, ": an array is required"));
  }
  if (json.contains("pair") && !json["pair"].is_array()) {
    return absl::InvalidArgumentError(StrCat(tj::Join(path, "pair"), ": an array is required"));
  }
  static const nlohmann::json* const kEmpty = new nlohmann::json(nlohmann::json::object());
  const nlohmann::json& special = tj::FieldOr(json, "special_tokens", *kEmpty);
  if (!special.is_object()) {
    return absl::InvalidArgumentError(
        StrCat(tj::Join(path, "special_tokens"), ": an object is required"));
  }
  bool seen_sequence = false;
  std::vector<std::string> pieces;
  for (size_t i = 0; i < json["single"].size(); ++i) {
    const nlohmann::json& item = json["single"][i];
    const std::string item_path = tj::Index(single_path, i);
    if (item.is_object() && item.contains("Sequence")) {
      RETURN_IF_ERROR(tj::CheckKeys(item, item_path, {"Sequence"}));
      const nlohmann::json& seq = item["Sequence"];
      RETURN_IF_ERROR(tj::CheckKeys(seq, tj::Join(item_path, "Sequence"), {"id", "type_id"}));
      if (tj::StringOr(seq, "id") != "A" || seen_sequence) {
        return tj::Unsupported(item_path, item,
                               "a single-sequence template holds the sequence A exactly once");
      }
      seen_sequence = true;
      pieces.push_back("$A");
      continue;
    }
    if (!(item.is_object() && item.contains("SpecialToken"))) {
      return tj::Unsupported(item_path, item, "{\"SpecialToken\": …} or {\"Sequence\": …}");
    }
    RETURN_IF_ERROR(tj::CheckKeys(item, item_path, {"SpecialToken"}));
    const nlohmann::json& token = item["SpecialToken"];
    RETURN_IF_ERROR(tj::CheckKeys(token, tj::Join(item_path, "SpecialToken"), {"id", "type_id"}));
    ASSIGN_OR_RETURN(const std::string name,
                     tj::RequiredString(token, tj::Join(item_path, "SpecialToken"), "id"));
    const std::string special_path = StrCat(tj::Join(path, "special_tokens"), "[\"", name, "\"]");
    if (!special.contains(name) || !special[name].is_object() || !special[name].contains("ids") ||
        !special[name]["ids"].is_array()) {
      return absl::InvalidArgumentError(StrCat(item_path, " names \"", name, "\", which ",
                                               special_path, " does not define with its \"ids\""));
    }
    std::vector<int64_t>& side = seen_sequence ? out->suffix : out->prefix;
    for (const nlohmann::json& id : special[name]["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0) {
        return absl::InvalidArgumentError(
            StrCat(special_path, ".ids: ", tj::Brief(id), " is not an id"));
      }
      side.push_back(id.get<int64_t>());
    }
    pieces.push_back(name);
  }
  if (!seen_sequence) {
    return tj::Unsupported(single_path, json["single"], "the template lacks the sequence $A");
  }
  out->description = StrCat("TemplateProcessing(", Join(pieces, " "), ")");
  return absl::OkStatus();
}

absl::Status ParseOne(const nlohmann::json& json, const std::string& path, bool* has_template,
                      SingleSequenceTemplate* out) {
  const std::string type = tj::StringOr(json, "type");
  if (type == "ByteLevel") {
    // add_prefix_space, trim_offsets and use_regex only move offsets here: no id changes.
    RETURN_IF_ERROR(
        tj::CheckKeys(json, path, {"type", "add_prefix_space", "trim_offsets", "use_regex"}));
    if (!*has_template) out->description = "ByteLevel";
    return absl::OkStatus();
  }
  if (type == "TemplateProcessing") {
    if (*has_template) {
      return tj::Unsupported(path, json, "only one TemplateProcessing is supported");
    }
    *has_template = true;
    return ParseTemplate(json, path, out);
  }
  return tj::Unsupported(json.is_object() && json.contains("type") ? tj::Join(path, "type") : path,
                         json.is_object() && json.contains("type") ? json["type"] : json,
                         "supported post-processors: ByteLevel, TemplateProcessing, and a "
                         "Sequence of them");
}

}  // namespace

absl::StatusOr<SingleSequenceTemplate> PostProcessorFromJson(const nlohmann::json& json) {
  SingleSequenceTemplate out;
  out.description = "none";
  bool has_template = false;
  if (json.is_null()) return out;
  if (tj::StringOr(json, "type") == "Sequence") {
    RETURN_IF_ERROR(tj::CheckKeys(json, "post_processor", {"type", "processors"}));
    if (!json.contains("processors") || !json["processors"].is_array()) {
      return absl::InvalidArgumentError("post_processor.processors: an array is required");
    }
    for (size_t i = 0; i < json["processors"].size(); ++i) {
      RETURN_IF_ERROR(ParseOne(json["processors"][i], tj::Index("post_processor.processors", i),
                               &has_template, &out));
    }
    return out;
  }
  RETURN_IF_ERROR(ParseOne(json, "post_processor", &has_template, &out));
  return out;
}

}  // namespace flywheel
