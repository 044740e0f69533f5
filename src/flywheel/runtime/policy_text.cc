#include "flywheel/runtime/policy_text.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "flywheel/actor/chat_turn_format.h"
#include "flywheel/actor/env_tokenizer.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/hf_generation_config.h"
#include "flywheel/tokenizer/hf_tokenizer.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;

absl::Status MissingFile(const fs::path& file, std::string_view what) {
  return absl::NotFoundError(
      StrCat("model.path: ", file.string(), " does not exist; with model.path flywheel uses the ",
             "model's own ", what, ": copy the file from the model's repository into ",
             file.parent_path().string()));
}

// model.path = dir: the directory's tokenizer, chat template and stop tokens.
absl::StatusOr<PolicyText> FromModelDirectory(const fs::path& dir) {
  const fs::path tokenizer_json = dir / "tokenizer.json";
  const fs::path tokenizer_config = dir / "tokenizer_config.json";
  if (!fs::exists(tokenizer_json)) return MissingFile(tokenizer_json, "tokenizer");
  // The chat template and its special tokens (and the turn's stop string) live here.
  if (!fs::exists(tokenizer_config)) {
    return MissingFile(tokenizer_config, "chat template and special tokens");
  }
  PolicyText text;
  text.tokenizer_name = tokenizer_json.string();
  HfTokenizerOptions options;
  options.tokenizer_config = tokenizer_config.string();
  ASSIGN_OR_RETURN(std::unique_ptr<HfTokenizer> tokenizer,
                   LoadHfTokenizer(tokenizer_json.string(), options));
  absl::StatusOr<ChatTemplate> chat_template = LoadChatTemplate(tokenizer_config.string());
  if (!chat_template.ok()) {
    return Annotate(chat_template.status(),
                    StrCat("model.path ", dir.string(),
                           ": episodes are played through the model's chat template (a base "
                           "model without one cannot be trained with model.path; use its "
                           "instruct variant or add a chat_template)"));
  }
  text.chat_template = std::make_unique<ChatTemplate>(std::move(*chat_template));
  ASSIGN_OR_RETURN(std::unique_ptr<ChatTurnFormat> format,
                   ChatTurnFormat::Create(text.chat_template.get(), tokenizer.get()));
  ASSIGN_OR_RETURN(const HfGenerationConfig generation, LoadHfGenerationConfig(dir));
  RETURN_IF_ERROR(
      format->AddStopTokens(generation.eos_token_ids,
                            StrCat((dir / "generation_config.json").string(), ": eos_token_id")));
  // The turn format, not the tokenizer, decides how turns end; special() follows it so that
  // anything reading end_of_turn sees the template's token.
  SpecialTokens special = tokenizer->special();
  special.end_of_turn = format->stop_tokens().front();
  if (special.eos < 0 && !generation.eos_token_ids.empty()) {
    special.eos = generation.eos_token_ids.front();
  }
  RETURN_IF_ERROR(tokenizer->SetSpecialTokens(special));
  text.turn_format = std::move(format);
  text.tokenizer = std::move(tokenizer);
  return text;
}

}  // namespace

std::string PolicyText::DebugString() const {
  std::string stops;
  for (int64_t id : turn_format->stop_tokens()) {
    absl::StatusOr<std::string> s = tokenizer->Decode({id});
    stops += StrCat(stops.empty() ? "" : ", ", s.ok() ? *s : "?", " (", id, ")");
  }
  return StrCat(tokenizer_name, " (vocabulary ", tokenizer->vocab_size(), "), ",
                chat_template != nullptr ? "its chat template" : "the plain turn format",
                ", stop tokens ", stops);
}

absl::StatusOr<PolicyText> MakePolicyText(const JobConfig& config, const EnvFactory& factory) {
  if (!config.model.path.empty()) {
    absl::StatusOr<PolicyText> text = FromModelDirectory(config.model.path);
    if (text.ok()) spdlog::info("policy text: {}", text->DebugString());
    return text;
  }
  PolicyText text;
  ASSIGN_OR_RETURN(text.tokenizer, MakeTokenizer(factory.vocabulary()));
  text.tokenizer_name = StrCat("the ", factory.task_name(), " tokenizer");
  text.turn_format = std::make_unique<PlainTurnFormat>(text.tokenizer.get());
  return text;
}

}  // namespace flywheel
