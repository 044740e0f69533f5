#include "flywheel/gateway/chat_messages.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel::gateway {
namespace {

using nlohmann::ordered_json;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolCallOpen = "<tool_call>";
constexpr std::string_view kToolCallClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

std::string_view StripChars(std::string_view s, std::string_view chars) {
  const size_t begin = s.find_first_not_of(chars);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(chars) - begin + 1);
}
std::string_view LStripChars(std::string_view s, std::string_view chars) {
  const size_t begin = s.find_first_not_of(chars);
  return begin == std::string_view::npos ? std::string_view() : s.substr(begin);
}
std::string_view StripWhitespace(std::string_view s) { return StripChars(s, " \t\n\r\f\v"); }

absl::Status Invalid(std::string_view where, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(where, " ", what));
}

// `got` for error messages: the JSON type, or the value itself when it is short.
std::string Got(const ordered_json& value) {
  if (value.is_string() || value.is_number() || value.is_boolean() || value.is_null()) {
    std::string text = value.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
    if (text.size() <= 40) return StrCat("(got ", text, ")");
  }
  if (value.is_array() && value.empty()) return "(got an empty array)";
  return StrCat("(got ", value.type_name(), ")");
}

// Never throws: the model's text or a client's string may be anything.
ordered_json ParseJsonOrDiscarded(std::string_view text) {
  return ordered_json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

std::string CompactJson(const ordered_json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, ordered_json::error_handler_t::replace);
}

// A call as the model writes it, {"name": "f", "arguments"|"parameters": {…}}, read into
// {"name", "arguments": object}; nullopt when `text` is anything else. A missing arguments object
// is {} (a call of a function without parameters); arguments given as a string holding an object
// are read too, as some fine-tunes write them.
std::optional<ordered_json> ReadModelCall(std::string_view text) {
  const ordered_json call = ParseJsonOrDiscarded(StripWhitespace(text));
  if (!call.is_object()) return std::nullopt;
  const auto name = call.find("name");
  if (name == call.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return std::nullopt;
  }
  ordered_json arguments = ordered_json::object();
  auto found = call.find("arguments");
  if (found == call.end()) found = call.find("parameters");
  if (found != call.end()) {
    if (found->is_object()) {
      arguments = *found;
    } else if (found->is_string()) {
      arguments = ParseJsonOrDiscarded(found->get_ref<const std::string&>());
      if (!arguments.is_object()) return std::nullopt;
    } else {
      return std::nullopt;
    }
  }
  return ordered_json{{"name", *name}, {"arguments", std::move(arguments)}};
}

ordered_json OpenAIToolCall(const ordered_json& call, std::string_view id_prefix, size_t index) {
  return ordered_json{
      {"id", StrCat(id_prefix, "_", index)},
      {"type", "function"},
      {"function", {{"name", call["name"]}, {"arguments", CompactJson(call["arguments"])}}}};
}

// --- DetectToolCallFormat -----------------------------------------------------------------------

// Made up so that nothing else a template prints (its instructions, the tools' schemas) can be
// mistaken for the call.
constexpr std::string_view kProbeFunction = "flywheel_probe_weather";
const ordered_json& ProbeArguments() {
  static const ordered_json* const arguments =
      new ordered_json(ordered_json::parse(R"({"city": "Reykjavik", "days": 3})"));
  return *arguments;
}

ordered_json ProbeTools() {
  return ordered_json::array(
      {{{"type", "function"},
        {"function",
         {{"name", kProbeFunction},
          {"description", "Weather forecast for a city."},
          {"parameters",
           {{"type", "object"},
            {"properties", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}}},
            {"required", {"city"}}}}}}}});
}

// The probe as a client sends it, so that the template sees what ToTemplateMessages makes of a
// real request.
ordered_json ProbeOpenAIMessages() {
  return ordered_json::array(
      {{{"role", "user"}, {"content", "What will the weather be in Reykjavik?"}},
       {{"role", "assistant"},
        {"content", nullptr},
        {"tool_calls",
         {{{"id", "call_probe"},
           {"type", "function"},
           {"function",
            {{"name", kProbeFunction}, {"arguments", CompactJson(ProbeArguments())}}}}}}}});
}

bool IsProbeCall(const std::optional<ordered_json>& call) {
  // Compared as unordered objects: a template may print the arguments in another key order.
  return call.has_value() && (*call)["name"] == kProbeFunction &&
         nlohmann::json((*call)["arguments"]) == nlohmann::json(ProbeArguments());
}

bool WritesHermesCall(std::string_view rendered) {
  for (size_t open = rendered.find(kToolCallOpen); open != std::string_view::npos;
       open = rendered.find(kToolCallOpen, open + 1)) {
    const size_t body = open + kToolCallOpen.size();
    const size_t close = rendered.find(kToolCallClose, body);
    if (close == std::string_view::npos) return false;
    if (IsProbeCall(ReadModelCall(rendered.substr(body, close - body)))) return true;
  }
  return false;
}

// The end of the JSON object that starts at text[0] ('{'), or npos when it does not close.
size_t JsonObjectEnd(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// `assistant_turn`: what the template wrote after the generation prompt, i.e. what the model
// itself would have to write. Llama 3.1's template writes the call as the turn's whole text.
bool WritesLlama3JsonCall(std::string_view assistant_turn) {
  std::string_view turn = LStripChars(assistant_turn, " \t\n\r");
  if (turn.starts_with(kPythonTag)) turn = LStripChars(turn.substr(kPythonTag.size()), " \t\n\r");
  if (!turn.starts_with('{')) return false;
  const size_t end = JsonObjectEnd(turn);
  return end != std::string_view::npos && IsProbeCall(ReadModelCall(turn.substr(0, end)));
}

// --- ToTemplateMessages
// ---------------------------------------------------------------------------

// `content` as a string: a string, or an array of text parts. Joined with "\n" as vLLM joins
// them, the server most agents were written against.
absl::StatusOr<std::string> ContentText(const ordered_json& content, std::string_view where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return Invalid(where, StrCat("must be a string or an array of content parts ", Got(content)));
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ordered_json& part = content[i];
    const std::string part_where = StrCat(where, "[", i, "]");
    if (!part.is_object()) {
      return Invalid(part_where, StrCat("must be a content part object ", Got(part)));
    }
    const auto type = part.find("type");
    if (type == part.end() || !type->is_string()) {
      return Invalid(part_where, "needs a string \"type\" (\"text\")");
    }
    if (*type != "text") {
      return Invalid(part_where, StrCat("has type ", type->dump(),
                                        ": the model behind this gateway reads "
                                        "text only; send {\"type\": \"text\", \"text\": …} parts"));
    }
    const auto part_text = part.find("text");
    if (part_text == part.end() || !part_text->is_string()) {
      return Invalid(
          StrCat(part_where, ".text"),
          StrCat("must be a string ", Got(part_text == part.end() ? ordered_json() : *part_text)));
    }
    if (i > 0) text += '\n';
    text += part_text->get_ref<const std::string&>();
  }
  return text;
}

// One OpenAI tool call → {"id"?, "type": "function", "function": {"name", "arguments": {…}}}:
// OpenAI sends arguments as a JSON string, templates print them with `tojson` as an object.
absl::StatusOr<ordered_json> TemplateToolCall(const ordered_json& call, std::string_view where) {
  if (!call.is_object()) return Invalid(where, StrCat("must be an object ", Got(call)));
  ordered_json out = ordered_json::object();
  if (const auto id = call.find("id"); id != call.end()) {
    if (!id->is_string())
      return Invalid(StrCat(where, ".id"), StrCat("must be a string ", Got(*id)));
    out["id"] = *id;
  }
  if (const auto type = call.find("type"); type != call.end() && *type != "function") {
    return Invalid(StrCat(where, ".type"), StrCat("must be \"function\" ", Got(*type)));
  }
  out["type"] = "function";
  const auto function = call.find("function");
  if (function == call.end() || !function->is_object()) {
    return Invalid(StrCat(where, ".function"),
                   "must be an object {\"name\": …, \"arguments\": \"{…}\"}");
  }
  const auto name = function->find("name");
  if (name == function->end() || !name->is_string() ||
      name->get_ref<const std::string&>().empty()) {
    return Invalid(StrCat(where, ".function.name"), "must be a non-empty string");
  }
  const std::string arguments_where = StrCat(where, ".function.arguments");
  const auto arguments = function->find("arguments");
  if (arguments == function->end()) {
    return Invalid(arguments_where, "is missing (a JSON object in a string, such as \"{}\")");
  }
  ordered_json object;
  if (arguments->is_object()) {  // some clients send the object itself
    object = *arguments;
  } else if (!arguments->is_string()) {
    return Invalid(arguments_where,
                   StrCat("must be a string holding a JSON object ", Got(*arguments)));
  } else if (StripWhitespace(arguments->get_ref<const std::string&>()).empty()) {
    object = ordered_json::object();  // clients replaying calls of functions without parameters
  } else {
    const std::string& text = arguments->get_ref<const std::string&>();
    try {
      object = ordered_json::parse(text);
    } catch (const ordered_json::parse_error& e) {
      return Invalid(arguments_where, StrCat("is not valid JSON: ", e.what()));
    }
    if (!object.is_object()) {
      return Invalid(arguments_where,
                     StrCat("must hold a JSON object (got ", object.type_name(), ")"));
    }
  }
  out["function"] = {{"name", *name}, {"arguments", std::move(object)}};
  return out;
}

// The function names of the calls made so far, by call id, for tool messages without a name.
using CallNames = std::map<std::string, std::string>;

absl::StatusOr<ordered_json> TemplateMessage(const ordered_json& message, size_t index,
                                             CallNames& call_names) {
  const std::string where = StrCat("messages[", index, "]");
  if (!message.is_object()) return Invalid(where, StrCat("must be an object ", Got(message)));
  const auto role_it = message.find("role");
  const ordered_json role_value = role_it == message.end() ? ordered_json() : *role_it;
  static constexpr std::string_view kRoles[] = {"system", "developer", "user", "assistant", "tool"};
  const bool known = role_value.is_string() &&
                     std::find(std::begin(kRoles), std::end(kRoles),
                               role_value.get_ref<const std::string&>()) != std::end(kRoles);
  if (!known) {
    return Invalid(
        StrCat(where, ".role"),
        StrCat("must be one of system, developer, user, assistant, tool ", Got(role_value)));
  }
  std::string role = role_value.get<std::string>();
  // OpenAI's newer name for the system role; templates know only "system".
  if (role == "developer") role = "system";
  const bool assistant = role == "assistant";

  const auto calls = message.find("tool_calls");
  const bool has_calls =
      calls != message.end() && !calls->is_null() && !(calls->is_array() && calls->empty());
  if (has_calls && !assistant) {
    return Invalid(StrCat(where, ".tool_calls"), "is allowed on assistant messages only");
  }

  ordered_json out = {{"role", role}};
  const auto content = message.find("content");
  if (content == message.end() || content->is_null()) {
    if (!(assistant && has_calls)) {
      return Invalid(StrCat(where, ".content"),
                     "is missing or null, which only an assistant message with tool_calls may be");
    }
    // Templates concatenate and test content as a string (Qwen3: '</think>' in content).
    out["content"] = "";
  } else {
    ASSIGN_OR_RETURN(out["content"], ContentText(*content, StrCat(where, ".content")));
  }
  if (const auto name = message.find("name"); name != message.end() && !name->is_null()) {
    if (!name->is_string()) {
      return Invalid(StrCat(where, ".name"), StrCat("must be a string ", Got(*name)));
    }
    out["name"] = *name;
  }
  if (has_calls) {
    if (!calls->is_array()) {
      return Invalid(StrCat(where, ".tool_calls"), StrCat("must be an array ", Got(*calls)));
    }
    // Present only when non-empty: Llama 3.1's template tests `'tool_calls' in message` and
    // raises on an assistant message whose list is empty.
    ordered_json& out_calls = out["tool_calls"] = ordered_json::array();
    for (size_t i = 0; i < calls->size(); ++i) {
      ASSIGN_OR_RETURN(ordered_json call,
                       TemplateToolCall((*calls)[i], StrCat(where, ".tool_calls[", i, "]")));
      if (call.contains("id")) {
        call_names[call["id"].get<std::string>()] = call["function"]["name"].get<std::string>();
      }
      out_calls.push_back(std::move(call));
    }
  }
  if (role == "tool") {
    if (const auto id = message.find("tool_call_id"); id != message.end()) {
      if (!id->is_string()) {
        return Invalid(StrCat(where, ".tool_call_id"), StrCat("must be a string ", Got(*id)));
      }
      out["tool_call_id"] = *id;
      // Some templates label a tool result with the function's name (message.name).
      const auto called = call_names.find(id->get<std::string>());
      if (!out.contains("name") && called != call_names.end()) out["name"] = called->second;
    }
  }
  if (const auto reasoning = message.find("reasoning_content");
      assistant && reasoning != message.end() && !reasoning->is_null()) {
    if (!reasoning->is_string()) {
      return Invalid(StrCat(where, ".reasoning_content"),
                     StrCat("must be a string ", Got(*reasoning)));
    }
    out["reasoning_content"] = *reasoning;
  }
  return out;
}

}  // namespace

std::string_view ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kNone:
      return "none";
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
  }
  return "unknown";
}

absl::StatusOr<ToolCallFormat> DetectToolCallFormat(const ChatTemplate& chat_template) {
  absl::StatusOr<ordered_json> messages = ToTemplateMessages(ProbeOpenAIMessages());
  if (!messages.ok()) {
    return absl::InternalError(StrCat("the tool-call probe is malformed: ", messages.status()));
  }
  ChatRenderOptions options;
  options.tools = ProbeTools();
  // A fixed date, so that the two renders below agree in templates that print today's date.
  options.now = [] { return absl::FromUnixSeconds(1721952000); };
  options.time_zone = absl::UTCTimeZone();
  constexpr std::string_view kContext =
      "probing how the chat template writes tool calls (a user message, then an assistant "
      "message with one tool call, with tools)";
  absl::StatusOr<std::string> conversation = chat_template.Render(*messages, options);
  if (!conversation.ok()) return Annotate(conversation.status(), kContext);
  if (WritesHermesCall(*conversation)) return ToolCallFormat::kHermes;

  // The assistant turn is what follows the prompt the model is given. Where the template does
  // not render the conversation as that prompt plus the turn, the turn is unknown: kNone.
  options.add_generation_prompt = true;
  absl::StatusOr<std::string> prompt =
      chat_template.Render(ordered_json::array({(*messages)[0]}), options);
  if (!prompt.ok()) return Annotate(prompt.status(), kContext);
  if (std::string_view(*conversation).starts_with(*prompt) &&
      WritesLlama3JsonCall(std::string_view(*conversation).substr(prompt->size()))) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kNone;
}

absl::StatusOr<ordered_json> ToTemplateMessages(const ordered_json& openai_messages) {
  if (!openai_messages.is_array() || openai_messages.empty()) {
    return absl::InvalidArgumentError(
        StrCat("messages must be a non-empty array of messages ", Got(openai_messages)));
  }
  ordered_json out = ordered_json::array();
  CallNames call_names;
  for (size_t i = 0; i < openai_messages.size(); ++i) {
    ASSIGN_OR_RETURN(ordered_json message, TemplateMessage(openai_messages[i], i, call_names));
    out.push_back(std::move(message));
  }
  return out;
}

absl::Status ValidateTools(const ordered_json& tools) {
  if (!tools.is_array()) {
    return absl::InvalidArgumentError(StrCat("tools must be an array of tools ", Got(tools)));
  }
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json& tool = tools[i];
    const std::string where = StrCat("tools[", i, "]");
    if (!tool.is_object()) return Invalid(where, StrCat("must be an object ", Got(tool)));
    const auto type = tool.find("type");
    if (type == tool.end() || *type != "function") {
      return Invalid(
          StrCat(where, ".type"),
          StrCat("must be \"function\" ", Got(type == tool.end() ? ordered_json() : *type)));
    }
    const auto function = tool.find("function");
    if (function == tool.end() || !function->is_object()) {
      return Invalid(StrCat(where, ".function"),
                     "must be an object {\"name\", \"description\"?, \"parameters\"?}");
    }
    const auto name = function->find("name");
    if (name == function->end() || !name->is_string() ||
        name->get_ref<const std::string&>().empty()) {
      return Invalid(StrCat(where, ".function.name"), "must be a non-empty string");
    }
    if (const auto d = function->find("description");
        d != function->end() && !d->is_null() && !d->is_string()) {
      return Invalid(StrCat(where, ".function.description"), StrCat("must be a string ", Got(*d)));
    }
    if (const auto p = function->find("parameters");
        p != function->end() && !p->is_null() && !p->is_object()) {
      return Invalid(StrCat(where, ".function.parameters"),
                     StrCat("must be a JSON schema object ", Got(*p)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ordered_json> ToTemplateTools(const ordered_json& tools) {
  RETURN_IF_ERROR(ValidateTools(tools));
  if (tools.empty()) return ordered_json(nullptr);
  return tools;
}

AssistantOutput ParseAssistantOutput(std::string_view text, ToolCallFormat format,
                                     std::string_view call_id_prefix) {
  AssistantOutput out;
  std::string_view rest = text;
  // Qwen's template writes '<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.
  if (const std::string_view lead = LStripChars(text, " \t\n\r"); lead.starts_with(kThinkOpen)) {
    const std::string_view after = lead.substr(kThinkOpen.size());
    const size_t close = after.find(kThinkClose);
    out.reasoning_content = StripChars(after.substr(0, close), "\n");
    rest = close == std::string_view::npos
               ? std::string_view()
               : LStripChars(after.substr(close + kThinkClose.size()), "\n");
  }

  switch (format) {
    case ToolCallFormat::kNone:
      out.content = rest;
      break;
    case ToolCallFormat::kHermes: {
      size_t pos = 0;
      while (pos < rest.size()) {
        const size_t open = rest.find(kToolCallOpen, pos);
        if (open == std::string_view::npos) break;
        const size_t body = open + kToolCallOpen.size();
        // An unclosed last block still counts when it holds a whole call (stopped at the tag).
        const size_t close = rest.find(kToolCallClose, body);
        const size_t body_end = close == std::string_view::npos ? rest.size() : close;
        const size_t block_end =
            close == std::string_view::npos ? rest.size() : close + kToolCallClose.size();
        out.content.append(rest.substr(pos, open - pos));
        if (std::optional<ordered_json> call = ReadModelCall(rest.substr(body, body_end - body))) {
          out.tool_calls.push_back(OpenAIToolCall(*call, call_id_prefix, out.tool_calls.size()));
        } else {
          out.content.append(rest.substr(open, block_end - open));
        }
        pos = block_end;
      }
      if (pos < rest.size()) out.content.append(rest.substr(pos));
      // The template separates content and calls with newlines; they are not the model's text.
      if (!out.tool_calls.empty()) out.content = StripWhitespace(out.content);
      break;
    }
    case ToolCallFormat::kLlama3Json: {
      std::string_view call_text = StripWhitespace(rest);
      if (call_text.starts_with(kPythonTag)) call_text = call_text.substr(kPythonTag.size());
      if (std::optional<ordered_json> call = ReadModelCall(call_text)) {
        out.tool_calls.push_back(OpenAIToolCall(*call, call_id_prefix, 0));
      } else {
        out.content = rest;
      }
      break;
    }
  }
  return out;
}

ordered_json ToOpenAIMessage(const AssistantOutput& output) {
  ordered_json message = {{"role", "assistant"}};
  if (output.content.empty() && !output.tool_calls.empty()) {
    message["content"] = nullptr;
  } else {
    message["content"] = output.content;
  }
  if (!output.reasoning_content.empty()) message["reasoning_content"] = output.reasoning_content;
  if (!output.tool_calls.empty()) message["tool_calls"] = output.tool_calls;
  return message;
}

std::string FinishReason(const AssistantOutput& output, std::string_view engine_reason) {
  if (!output.tool_calls.empty()) return "tool_calls";
  return std::string(engine_reason);
}

}  // namespace flywheel::gateway
