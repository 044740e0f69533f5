// A Hugging Face model's chat template as the turn format (turn_format.h): the task's prompt is
// the first user message, each environment reply the next user message, and the policy's turn
// ends with the template's stop token (<|im_end|> for Qwen, <|eot_id|> for Llama-3):
//
//   <|im_start|>user\nGuess a number in [0, 16).<|im_end|>\n<|im_start|>assistant\n   prompt
//   8<|im_end|>                                                                        policy
//   \n<|im_start|>user\nlower<|im_end|>\n<|im_start|>assistant\n                       reply
//
// The text around a reply is worked out once from probe conversations (chat/chat_episode.h
// finds where the policy's generation stops and what the template writes after it): the reply
// goes between a fixed `before` and `after`. A template that changes message content (Llama-3
// trims it) is rendered for every reply instead, through the same probe. Episodes keep their
// own text: a template that re-renders earlier turns differently (Qwen3 drops old reasoning)
// does not change tokens the policy has already seen. Each wrapped reply is tokenised whole.
#ifndef FLYWHEEL_ACTOR_CHAT_TURN_FORMAT_H_
#define FLYWHEEL_ACTOR_CHAT_TURN_FORMAT_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/actor/turn_format.h"
#include "flywheel/chat/chat_episode.h"
#include "flywheel/chat/chat_template.h"

namespace flywheel {

class ChatTurnFormat : public TurnFormat {
 public:
  // `chat_template` and `tokenizer` are borrowed. Every stop string must be one token of the
  // tokenizer (an added special token), or the engine could not stop at it.
  static absl::StatusOr<std::unique_ptr<ChatTurnFormat>> Create(const ChatTemplate* chat_template,
                                                                const Tokenizer* tokenizer,
                                                                ChatRenderOptions options = {});

  absl::StatusOr<std::vector<int64_t>> EnvironmentTurn(const Trajectory& t,
                                                       std::string_view observation) const override;
  const std::vector<int64_t>& stop_tokens() const override { return stop_tokens_; }

  // The text EnvironmentTurn encodes: `stopped` = the policy's last turn ended with a stop
  // token; unused for the first turn.
  absl::StatusOr<std::string> EnvironmentText(bool first, bool stopped,
                                              std::string_view observation) const;

 private:
  // Where a reply goes in the text the template writes around it.
  struct Around {
    std::string before;
    std::string after;
    bool verbatim = false;  // the template writes the reply unchanged: before + reply + after
  };
  enum Place { kFirst = 0, kAfterStop = 1, kAfterCut = 2 };

  ChatTurnFormat(const ChatTemplate* chat_template, const Tokenizer* tokenizer,
                 ChatRenderOptions options)
      : chat_template_(chat_template), tokenizer_(tokenizer), options_(std::move(options)) {}
  // The template's own text for `observation` at `place`, from a probe conversation.
  absl::StatusOr<std::string> Render(Place place, std::string_view observation) const;

  const ChatTemplate* chat_template_;
  const Tokenizer* tokenizer_;
  ChatRenderOptions options_;
  Around around_[3];
  std::vector<int64_t> stop_tokens_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_ACTOR_CHAT_TURN_FORMAT_H_
