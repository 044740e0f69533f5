#include "flywheel/model/turn_template.h"

#include "flywheel/core/strings.h"

namespace flywheel {

absl::Status TurnTemplate::AddEnvironmentTurn(std::string_view text) {
  auto ids = tokenizer_->Encode(text);
  if (!ids.ok()) return ids.status();
  if (tokens_.empty()) ids->insert(ids->begin(), tokenizer_->special().bos);
  ids->push_back(tokenizer_->special().end_of_turn);
  tokens_.insert(tokens_.end(), ids->begin(), ids->end());
  trainable_.insert(trainable_.end(), ids->size(), false);
  return absl::OkStatus();
}

absl::Status TurnTemplate::AddPolicyTurn(const std::vector<int64_t>& tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= tokenizer_->vocab_size()) {
      return absl::InvalidArgumentError(StrCat("policy turn: token ", tokens[i], " at index ", i,
                                               " outside the vocabulary [0, ",
                                               tokenizer_->vocab_size(), ")"));
    }
  }
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  trainable_.insert(trainable_.end(), tokens.size(), true);
  return absl::OkStatus();
}

std::vector<int64_t> TurnTemplate::PolicyStopTokens() const {
  return {tokenizer_->special().end_of_turn, tokenizer_->special().eos};
}

bool TurnTemplate::episode_ended() const {
  return !tokens_.empty() && trainable_.back() && tokens_.back() == tokenizer_->special().eos;
}

std::string TurnTemplate::Render() const {
  std::string out;
  size_t i = 0;
  while (i < tokens_.size()) {
    size_t j = i;
    while (j < tokens_.size() && trainable_[j] == trainable_[i]) ++j;
    auto text = tokenizer_->Decode(std::vector<int64_t>(tokens_.begin() + i, tokens_.begin() + j));
    out += StrCat(trainable_[i] ? "[policy]" : "[env]", text.ok() ? *text : "<invalid>");
    i = j;
  }
  return out;
}

}  // namespace flywheel
