// How an episode becomes one token sequence, and which of its tokens are the policy's:
//
//   <|bos|> task prompt <|eot|>  action <|eot|>  observation <|eot|>  action <|eos|>
//   └──── environment ─────────┘ └─ policy ───┘  └─── environment ───┘ └─ policy ──┘
//   trainable:  0 ... 0            1 ... 1          0 ... 0               1 ... 1
//
// The policy generates until it emits end-of-turn (its turn is over, the environment answers)
// or EOS (the episode is over); those stop tokens are its own and trainable. Environment text is
// tokenized here and closed with end-of-turn, never trainable.
#ifndef FLYWHEEL_MODEL_TURN_TEMPLATE_H_
#define FLYWHEEL_MODEL_TURN_TEMPLATE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/model/tokenizer.h"

namespace flywheel {

class TurnTemplate {
 public:
  explicit TurnTemplate(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {}

  // Appends an environment turn (the first one starts with BOS), closed with end-of-turn.
  absl::Status AddEnvironmentTurn(std::string_view text);
  // Appends tokens the policy generated (normally ending in a stop token); all trainable.
  // An id outside the vocabulary is an error.
  absl::Status AddPolicyTurn(const std::vector<int64_t>& tokens);

  // Stop tokens for the engine: end-of-turn and EOS.
  std::vector<int64_t> PolicyStopTokens() const;
  // True when the last policy turn ended with EOS.
  bool episode_ended() const;

  const std::vector<int64_t>& tokens() const { return tokens_; }
  const std::vector<bool>& trainable() const { return trainable_; }
  // "[env]<|bos|>task<|eot|>[policy]move<|eot|>..." for logs and tests.
  std::string Render() const;

 private:
  const Tokenizer* tokenizer_;
  std::vector<int64_t> tokens_;
  std::vector<bool> trainable_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_TURN_TEMPLATE_H_
