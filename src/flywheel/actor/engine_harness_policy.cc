#include "flywheel/actor/engine_harness_policy.h"

#include "flywheel/core/strings.h"

namespace flywheel {

absl::StatusOr<HarnessTurn> EngineHarnessPolicy::Generate(const HarnessRequest& request) {
  const std::vector<int64_t> prompt(request.context.begin(), request.context.end());
  absl::StatusOr<SequenceId> id =
      engine_->AddSequence(prompt, SequenceOptions{options_.sampling, options_.seed + calls_});
  if (!id.ok()) return id.status();
  ++calls_;
  HarnessTurn turn;
  absl::Status status =
      engine_->StartTurn(*id, TurnOptions{options_.max_new_tokens, {options_.end_of_turn}});
  // One token per Step for the only generating sequence; the turn ends by the engine's own
  // limits (stop token, max_new_tokens, max length), so the loop is bounded by max_new_tokens.
  for (int64_t i = 0; status.ok() && i <= options_.max_new_tokens; ++i) {
    absl::StatusOr<std::vector<GeneratedToken>> tokens = engine_->Step();
    if (!tokens.ok()) {
      status = tokens.status();
      break;
    }
    bool ended = false;
    for (const GeneratedToken& t : *tokens) {
      if (t.sequence != *id) continue;
      turn.generated.push_back(static_cast<int32_t>(t.token));
      turn.logprobs.push_back(t.logprob);
      turn.versions.push_back(t.version);
      ended = t.end != TurnEnd::kNone;
    }
    if (ended) break;
  }
  if (absl::Status removed = engine_->RemoveSequence(*id); status.ok()) status = removed;
  if (!status.ok()) return status;
  if (turn.generated.empty()) {
    return absl::InternalError(StrCat("engine harness policy: sequence ", *id,
                                      " generated nothing within max_new_tokens ",
                                      options_.max_new_tokens));
  }
  return turn;
}

}  // namespace flywheel
