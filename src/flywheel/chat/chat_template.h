// A Hugging Face model's chat template: the Jinja `chat_template` of its tokenizer_config.json,
// rendered as transformers' apply_chat_template renders it (same variables, same environment), so
// that flywheel's prompts are byte for byte the text the model was trained on.
//
//   auto tmpl = LoadChatTemplate("…/tokenizer_config.json");
//   ChatRenderOptions o;  o.add_generation_prompt = true;  o.variables["enable_thinking"] = false;
//   std::string prompt = *tmpl->Render(messages, o);
//
// messages: [{"role": "system"|"user"|"assistant"|"tool", "content": "…",
//             "tool_calls": [{"type": "function", "function": {"name": …, "arguments": {…}}}],
//             "reasoning_content": "…"}, …]
//
// The template sees `messages`, `tools` (None unless given), `documents` (None),
// `add_generation_prompt`, the special tokens transformers passes (bos_token, eos_token,
// unk_token, sep_token, pad_token, cls_token, mask_token, additional_special_tokens; only those
// the config sets, so an absent bos_token is undefined, not None), then `variables`.
#ifndef FLYWHEEL_CHAT_CHAT_TEMPLATE_H_
#define FLYWHEEL_CHAT_CHAT_TEMPLATE_H_

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/chat/jinja_template.h"
#include "nlohmann/json.hpp"

namespace flywheel {

struct ChatRenderOptions {
  bool add_generation_prompt = false;
  nlohmann::ordered_json tools = nullptr;  // a list of JSON schemas, or null
  // Extra template variables (enable_thinking, …); they override the special tokens.
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  // strftime_now's clock (null: the wall clock) and time zone (transformers: local time).
  std::function<absl::Time()> now;
  absl::TimeZone time_zone = absl::LocalTimeZone();
};

class ChatTemplate {
 public:
  // `config`: the parsed tokenizer_config.json (`source` names it in errors). Its chat_template
  // is a string, or a list of {"name", "template"}. `name` picks one of a list; empty: as
  // transformers does, "tool_use" when tools are given and it exists, else "default".
  static absl::StatusOr<ChatTemplate> FromTokenizerConfig(const nlohmann::ordered_json& config,
                                                          std::string_view source,
                                                          std::string_view name = "");
  // A template given as text, with the special tokens to pass it.
  static absl::StatusOr<ChatTemplate> FromString(
      std::string_view source,
      nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object());

  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& messages,
                                     const ChatRenderOptions& options = {}) const;

  // The special tokens passed to the template ({"bos_token": …, "eos_token": …, …}).
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }
  // "" when the config sets none.
  std::string bos_token() const;
  std::string eos_token() const;
  // Contents of the config's added tokens marked special (added_tokens_decoder), longest first:
  // the strings the policy can end its turn with.
  const std::vector<std::string>& added_special_tokens() const { return added_special_tokens_; }
  // Names of the templates ("default" for a plain string).
  std::vector<std::string> names() const;

 private:
  std::map<std::string, jinja::Template> templates_;  // by name
  std::string fixed_name_;                            // set when the loader chose one
  std::string source_;                                // for messages
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
  std::vector<std::string> added_special_tokens_;
};

// Reads tokenizer_config.json (see FromTokenizerConfig). When the config has no chat_template,
// a chat_template.jinja beside it (newer Hugging Face repositories) is used.
absl::StatusOr<ChatTemplate> LoadChatTemplate(const std::string& tokenizer_config_path,
                                              std::string_view name = "");

}  // namespace flywheel

#endif  // FLYWHEEL_CHAT_CHAT_TEMPLATE_H_
