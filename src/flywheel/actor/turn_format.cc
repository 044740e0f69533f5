#include "flywheel/actor/turn_format.h"

#include <algorithm>

#include "flywheel/core/status_macros.h"

namespace flywheel {

bool TurnFormat::IsStop(int64_t token) const {
  const std::vector<int64_t>& stops = stop_tokens();
  return std::find(stops.begin(), stops.end(), token) != stops.end();
}

PlainTurnFormat::PlainTurnFormat(const Tokenizer* tokenizer)
    : tokenizer_(tokenizer),
      stop_tokens_{tokenizer->special().end_of_turn, tokenizer->special().eos} {}

// BOS first in a new trajectory, and an end-of-turn closing a policy turn that max_new_tokens
// cut before a stop token.
absl::StatusOr<std::vector<int64_t>> PlainTurnFormat::EnvironmentTurn(
    const Trajectory& t, std::string_view observation) const {
  ASSIGN_OR_RETURN(const std::vector<int64_t> encoded, tokenizer_->Encode(observation));
  const SpecialTokens& special = tokenizer_->special();
  std::vector<int64_t> tokens;
  if (t.tokens.empty()) tokens.push_back(special.bos);
  if (!t.tokens.empty() && t.trainable.back() && !IsStop(t.tokens.back())) {
    tokens.push_back(special.end_of_turn);
  }
  tokens.insert(tokens.end(), encoded.begin(), encoded.end());
  tokens.push_back(special.end_of_turn);
  return tokens;
}

}  // namespace flywheel
