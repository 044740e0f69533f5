// The text side of a job's policy: the tokenizer and the turn format every actor, learner and
// cell of the job uses. One function decides them, so that all processes of a job tokenise
// alike and the learner's vocabulary check sees the actors' tokenizer.
//
//   no model.path      the environment's tokenizer (MakeTokenizer: word-level for a closed
//                      vocabulary, byte-level for free text) and PlainTurnFormat
//   model.path = DIR   DIR/tokenizer.json (HfTokenizer, bos/eos from DIR/tokenizer_config.json)
//                      and ChatTurnFormat over DIR's chat template (tokenizer_config.json's
//                      chat_template, or DIR/chat_template.jinja); the stop tokens are the
//                      template's end of turn, then DIR/generation_config.json's eos_token_id
//
// A model directory without tokenizer.json, tokenizer_config.json or a chat template is an
// error naming the file or key: there is no fallback to PlainTurnFormat, whose <|bos|>/<|eot|>
// markup a pretrained model has never seen (and a base tokenizer such as Qwen3's has no BOS).
#ifndef FLYWHEEL_RUNTIME_POLICY_TEXT_H_
#define FLYWHEEL_RUNTIME_POLICY_TEXT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/actor/turn_format.h"
#include "flywheel/chat/chat_template.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/model/tokenizer.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel {

// Owns what the turn format borrows; the pointees do not move when the struct does. Shared by
// every actor of a process (all three are thread-safe for const use).
struct PolicyText {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;  // with model.path; null otherwise
  std::unique_ptr<TurnFormat> turn_format;      // never null; borrows the two above
  // What the tokenizer is, for messages: "the guess task's tokenizer", "DIR/tokenizer.json".
  std::string tokenizer_name;

  std::string DebugString() const;
};

// The tokenizer and turn format for `config`; without model.path they follow the environment
// that `factory` makes (its vocabulary()).
absl::StatusOr<PolicyText> MakePolicyText(const JobConfig& config, const EnvFactory& factory);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_POLICY_TEXT_H_
