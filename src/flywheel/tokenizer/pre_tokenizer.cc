#include "flywheel/tokenizer/pre_tokenizer.h"

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/tokenizer/json_fields.h"

namespace flywheel {
namespace {

namespace tj = tokenizer_json;

}  // namespace

absl::StatusOr<PreTokenizer> PreTokenizer::FromJson(const nlohmann::json& json) {
  const std::string root = "pre_tokenizer";
  if (json.is_null()) {
    return tj::Unsupported(root, json,
                           "a byte-level BPE needs a ByteLevel pre-tokenizer (alone or last in a "
                           "Sequence)");
  }
  std::vector<std::pair<std::string, const nlohmann::json*>> steps;  // path, step
  if (tj::StringOr(json, "type") == "Sequence") {
    RETURN_IF_ERROR(tj::CheckKeys(json, root, {"type", "pretokenizers"}));
    if (!json.contains("pretokenizers") || !json["pretokenizers"].is_array() ||
        json["pretokenizers"].empty()) {
      return absl::InvalidArgumentError(
          "pre_tokenizer.pretokenizers: a non-empty array is required");
    }
    for (size_t i = 0; i < json["pretokenizers"].size(); ++i) {
      steps.emplace_back(tj::Index("pre_tokenizer.pretokenizers", i), &json["pretokenizers"][i]);
    }
  } else {
    steps.emplace_back(root, &json);
  }

  PreTokenizer pre;
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& [path, step] = steps[i];
    const std::string type = tj::StringOr(*step, "type");
    if (type == "Split") {
      RETURN_IF_ERROR(tj::CheckKeys(*step, path, {"type", "pattern", "behavior", "invert"}));
      ASSIGN_OR_RETURN(const std::string behavior, tj::RequiredString(*step, path, "behavior"));
      if (behavior != "Isolated") {
        return tj::Unsupported(tj::Join(path, "behavior"), behavior,
                               "only \"Isolated\" is supported");
      }
      ASSIGN_OR_RETURN(const bool invert, tj::OptionalBool(*step, path, "invert", false));
      if (invert) return tj::Unsupported(tj::Join(path, "invert"), true, "not supported");
      const nlohmann::json& pattern = tj::FieldOrNull(*step, "pattern");
      const std::string pattern_path = tj::Join(path, "pattern");
      bool literal = false;
      if (pattern.is_object() && pattern.size() == 1 && pattern.contains("String") &&
          pattern["String"].is_string()) {
        literal = true;
      } else if (!(pattern.is_object() && pattern.size() == 1 && pattern.contains("Regex") &&
                   pattern["Regex"].is_string())) {
        return absl::InvalidArgumentError(
            StrCat(pattern_path, " = ", tj::Brief(pattern), ": {\"Regex\": …} or {\"String\": …}"));
      }
      const std::string text = pattern.begin().value().get<std::string>();
      auto regex = SplitRegex::Compile(text, literal);
      if (!regex.ok()) {
        return Annotate(regex.status(), tj::Join(pattern_path, literal ? "String" : "Regex"));
      }
      pre.steps_.push_back(Step{*std::move(regex)});
    } else if (type == "ByteLevel") {
      RETURN_IF_ERROR(
          tj::CheckKeys(*step, path, {"type", "add_prefix_space", "trim_offsets", "use_regex"}));
      if (i + 1 != steps.size()) {
        return tj::Unsupported(path, *step,
                               "ByteLevel must be the last pre-tokenizer: the steps after it "
                               "would see the byte-level alphabet");
      }
      // HF's defaults: add_prefix_space true, use_regex true.
      ASSIGN_OR_RETURN(const bool add_prefix_space,
                       tj::OptionalBool(*step, path, "add_prefix_space", true));
      ASSIGN_OR_RETURN(const bool use_regex, tj::OptionalBool(*step, path, "use_regex", true));
      RETURN_IF_ERROR(tj::OptionalBool(*step, path, "trim_offsets", true).status());
      auto gpt2 = SplitRegex::Compile(kGpt2Pattern);
      if (!gpt2.ok()) return Annotate(gpt2.status(), "GPT-2's pre-tokenizer regex");
      Step s{*std::move(gpt2)};
      s.byte_level = true;
      s.use_regex = use_regex;
      s.add_prefix_space = add_prefix_space;
      pre.steps_.push_back(std::move(s));
    } else {
      return tj::Unsupported(
          step->is_object() && step->contains("type") ? tj::Join(path, "type") : path,
          step->is_object() && step->contains("type") ? (*step)["type"] : *step,
          "supported pre-tokenizers: ByteLevel, Split, and a Sequence of "
          "Split steps ending in ByteLevel");
    }
  }
  if (!pre.steps_.back().byte_level) {
    return tj::Unsupported(root, json,
                           "a byte-level BPE needs a ByteLevel pre-tokenizer (alone or last in a "
                           "Sequence)");
  }
  return pre;
}

void PreTokenizer::Split(std::string_view text,
                         absl::FunctionRef<void(std::string_view)> piece) const {
  if (!text.empty()) Apply(0, text, piece);
}

void PreTokenizer::Apply(size_t step, std::string_view text,
                         absl::FunctionRef<void(std::string_view)> piece) const {
  if (step == steps_.size()) {
    piece(text);
    return;
  }
  const Step& s = steps_[step];
  auto next = [&](std::string_view sub) { Apply(step + 1, sub, piece); };
  if (!s.byte_level) {
    s.regex.Split(text, next);
    return;
  }
  std::string prefixed;
  if (s.add_prefix_space && text[0] != ' ') {
    prefixed = StrCat(" ", text);
    text = prefixed;
  }
  if (s.use_regex) {
    s.regex.Split(text, next);
  } else {
    next(text);
  }
}

std::string PreTokenizer::DebugString() const {
  std::vector<std::string> parts;
  for (const Step& s : steps_) {
    if (s.byte_level) {
      parts.push_back(StrCat("ByteLevel(add_prefix_space=", s.add_prefix_space,
                             ", use_regex=", s.use_regex, ")"));
    } else {
      parts.push_back(StrCat("Split(", s.regex.pattern(), ")"));
    }
  }
  return flywheel::Join(parts, " > ");
}

}  // namespace flywheel
