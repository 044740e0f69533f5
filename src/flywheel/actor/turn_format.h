// How an episode's text becomes tokens around the policy's turns: which tokens open the episode
// and wrap each environment reply, and which tokens end a policy turn. The policy's own tokens
// are what it sampled; everything a format adds is the environment's (never trainable).
//
//   PlainTurnFormat   flywheel's own models: <|bos|> task <|eot|> action <|eot|> reply <|eot|> …
//                     (model/turn_template.h draws it)
//   ChatTurnFormat    a Hugging Face model's chat template (chat_turn_format.h)
//
// Formats are stateless: the tokens of a reply depend on the trajectory so far and the reply,
// so an episode handed to another actor (suspended_episode.h) continues with any actor's format
// object. Thread-safe (const).
#ifndef FLYWHEEL_ACTOR_TURN_FORMAT_H_
#define FLYWHEEL_ACTOR_TURN_FORMAT_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/trajectory.h"
#include "flywheel/model/tokenizer.h"

namespace flywheel {

class TurnFormat {
 public:
  virtual ~TurnFormat() = default;
  // Tokens appended before the next policy turn, for the environment's `observation` (the
  // task's prompt when `t` is empty, else the reply to the policy's last turn, which ends
  // `t`). An error names what could not be encoded.
  virtual absl::StatusOr<std::vector<int64_t>> EnvironmentTurn(
      const Trajectory& t, std::string_view observation) const = 0;
  // Tokens that end a policy turn (the engine stops at them); the first ends a turn, any
  // other may end the episode too.
  virtual const std::vector<int64_t>& stop_tokens() const = 0;
  bool IsStop(int64_t token) const;
};

// flywheel's own format over `tokenizer`'s special tokens (not owned).
class PlainTurnFormat : public TurnFormat {
 public:
  explicit PlainTurnFormat(const Tokenizer* tokenizer);
  absl::StatusOr<std::vector<int64_t>> EnvironmentTurn(const Trajectory& t,
                                                       std::string_view observation) const override;
  const std::vector<int64_t>& stop_tokens() const override { return stop_tokens_; }

 private:
  const Tokenizer* tokenizer_;
  std::vector<int64_t> stop_tokens_;  // end-of-turn, EOS
};

}  // namespace flywheel

#endif  // FLYWHEEL_ACTOR_TURN_FORMAT_H_
