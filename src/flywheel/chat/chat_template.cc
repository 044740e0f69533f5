#include "flywheel/chat/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

// The special tokens transformers' special_tokens_map holds (SPECIAL_TOKENS_ATTRIBUTES).
constexpr std::string_view kSpecialTokenKeys[] = {
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};

// A token is a string or an AddedToken object {"content": …}.
// Messages, tools and variables are refused when they nest deeper than this: turning them into
// template values, printing them and tojson all recurse once per level, and a tool call's
// arguments come from a policy's output (a million '[' overflowed the stack).
constexpr int kMaxJsonDepth = 64;

// Whether an array or object in `json` lies more than `max` levels down (without recursing).
bool DeeperThan(const nlohmann::ordered_json& json, int max) {
  std::vector<std::pair<const nlohmann::ordered_json*, int>> stack = {{&json, 1}};
  while (!stack.empty()) {
    const auto [value, depth] = stack.back();
    stack.pop_back();
    if (!value->is_structured()) continue;
    if (depth > max) return true;
    for (const auto& item : *value) stack.emplace_back(&item, depth + 1);
  }
  return false;
}

absl::StatusOr<std::string> TokenContent(const nlohmann::ordered_json& token,
                                         std::string_view source, std::string_view key) {
  if (token.is_string()) return token.get<std::string>();
  if (token.is_object() && token.contains("content") && token["content"].is_string()) {
    return token["content"].get<std::string>();
  }
  return absl::InvalidArgumentError(StrCat(source, ": ", key,
                                           " must be a string or an object with a string "
                                           "\"content\", got ",
                                           token.is_structured() ? StrCat("an ", token.type_name())
                                                                 : token.dump()));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot open ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfig(const nlohmann::ordered_json& config,
                                                               std::string_view source,
                                                               std::string_view name) {
  if (!config.is_object()) return absl::InvalidArgumentError(StrCat(source, ": not a JSON object"));
  ChatTemplate result;
  result.source_ = std::string(source);
  for (std::string_view key : kSpecialTokenKeys) {
    const auto it = config.find(std::string(key));
    if (it == config.end() || it->is_null()) continue;
    ASSIGN_OR_RETURN(std::string content, TokenContent(*it, source, key));
    result.special_tokens_[std::string(key)] = content;
  }
  if (auto it = config.find("additional_special_tokens"); it != config.end() && it->is_array()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& token : *it) {
      ASSIGN_OR_RETURN(std::string content,
                       TokenContent(token, source, "additional_special_tokens"));
      list.push_back(content);
    }
    result.special_tokens_["additional_special_tokens"] = list;
  }
  if (auto it = config.find("added_tokens_decoder"); it != config.end() && it->is_object()) {
    for (const auto& [id, token] : it->items()) {
      if (token.is_object() && token.contains("special") && token["special"].is_boolean() &&
          token["special"].get<bool>() && token.contains("content") &&
          token["content"].is_string()) {
        result.added_special_tokens_.push_back(token["content"].get<std::string>());
      }
    }
  }
  std::stable_sort(result.added_special_tokens_.begin(), result.added_special_tokens_.end(),
                   [](const std::string& a, const std::string& b) { return a.size() > b.size(); });

  const auto chat = config.find("chat_template");
  if (chat == config.end() || chat->is_null()) {
    return absl::NotFoundError(StrCat(source, ": no \"chat_template\" key"));
  }
  std::vector<std::pair<std::string, std::string>> sources;
  if (chat->is_string()) {
    sources.emplace_back("default", chat->get<std::string>());
  } else if (chat->is_array()) {
    for (const auto& entry : *chat) {
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
          !entry.contains("template") || !entry["template"].is_string()) {
        return absl::InvalidArgumentError(
            StrCat(source,
                   ": chat_template list entries must be {\"name\": string, "
                   "\"template\": string}"));
      }
      sources.emplace_back(entry["name"].get<std::string>(), entry["template"].get<std::string>());
    }
  } else {
    return absl::InvalidArgumentError(
        StrCat(source, ": chat_template must be a string or a list of {name, template}"));
  }
  for (const auto& [template_name, text] : sources) {
    absl::StatusOr<jinja::Template> parsed = jinja::Template::Parse(text);
    if (!parsed.ok()) {
      return Annotate(parsed.status(), StrCat(source, ": chat_template '", template_name, "'"));
    }
    result.templates_.emplace(template_name, std::move(*parsed));
  }
  if (!name.empty()) {
    if (result.templates_.count(std::string(name)) == 0) {
      return absl::NotFoundError(StrCat(source, ": no chat template named '", name, "' (has ",
                                        Join(result.names(), ", "), ")"));
    }
    result.fixed_name_ = std::string(name);
  }
  return result;
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromString(std::string_view source,
                                                      nlohmann::ordered_json special_tokens) {
  nlohmann::ordered_json config = std::move(special_tokens);
  config["chat_template"] = std::string(source);
  return FromTokenizerConfig(config, "chat template");
}

std::vector<std::string> ChatTemplate::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : templates_) out.push_back(name);
  return out;
}

std::string ChatTemplate::bos_token() const {
  return special_tokens_.value("bos_token", std::string());
}

std::string ChatTemplate::eos_token() const {
  return special_tokens_.value("eos_token", std::string());
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& messages,
                                                 const ChatRenderOptions& options) const {
  if (!messages.is_array()) {
    return absl::InvalidArgumentError(StrCat(source_, ": messages must be a JSON list"));
  }
  // transformers' get_chat_template: an explicit name, else tool_use with tools, else default.
  std::string name = fixed_name_;
  if (name.empty()) {
    if (!options.tools.is_null() && templates_.count("tool_use") > 0) {
      name = "tool_use";
    } else if (templates_.count("default") > 0) {
      name = "default";
    } else {
      return absl::InvalidArgumentError(StrCat(source_, ": several chat templates (",
                                               Join(names(), ", "),
                                               ") and none named 'default'; choose one by name"));
    }
  }
  for (const auto& [what, json] : {std::pair<const char*, const nlohmann::ordered_json*>{
                                       "messages", &messages},
                                   {"tools", &options.tools},
                                   {"variables", &options.variables}}) {
    if (DeeperThan(*json, kMaxJsonDepth)) {
      return absl::InvalidArgumentError(StrCat(source_, ": the ", what, " nest deeper than ",
                                               kMaxJsonDepth, " levels"));
    }
  }
  jinja::ValueDict variables;
  variables.emplace_back("messages", jinja::Value::FromJson(messages));
  variables.emplace_back("tools", jinja::Value::FromJson(options.tools));
  variables.emplace_back("documents", jinja::Value::None());
  variables.emplace_back("add_generation_prompt",
                         jinja::Value::Bool(options.add_generation_prompt));
  for (const auto& [key, value] : special_tokens_.items()) {
    variables.emplace_back(key, jinja::Value::FromJson(value));
  }
  if (!options.variables.is_null()) {
    if (!options.variables.is_object()) {
      return absl::InvalidArgumentError("chat template variables must be a JSON object");
    }
    for (const auto& [key, value] : options.variables.items()) {
      variables.emplace_back(key, jinja::Value::FromJson(value));
    }
  }
  jinja::RenderOptions render_options;
  render_options.now = options.now;
  render_options.time_zone = options.time_zone;
  absl::StatusOr<std::string> text = templates_.at(name).Render(variables, render_options);
  if (!text.ok()) {
    return Annotate(text.status(), StrCat(source_, ": chat_template '", name, "'"));
  }
  return text;
}

absl::StatusOr<ChatTemplate> LoadChatTemplate(const std::string& tokenizer_config_path,
                                              std::string_view name) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(tokenizer_config_path));
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(text, nullptr, false);
  if (config.is_discarded()) {
    return absl::InvalidArgumentError(StrCat(tokenizer_config_path, ": not valid JSON"));
  }
  if (config.is_object() && !config.contains("chat_template")) {
    const std::filesystem::path jinja_file =
        std::filesystem::path(tokenizer_config_path).parent_path() / "chat_template.jinja";
    if (std::filesystem::exists(jinja_file)) {
      ASSIGN_OR_RETURN(std::string source, ReadFile(jinja_file.string()));
      config["chat_template"] = source;
    }
  }
  return ChatTemplate::FromTokenizerConfig(config, tokenizer_config_path, name);
}

}  // namespace flywheel
