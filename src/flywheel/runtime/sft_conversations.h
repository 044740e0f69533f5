// The supervised stage's data from a file ([sft] source = "jsonl", path = FILE): one conversation
// a line, in the chat format Hugging Face datasets and the OpenAI API share,
//
//   {"messages": [{"role": "user", "content": "compute 37 * 48 + 12"},
//                 {"role": "assistant", "content": "CALL calc 37 * 48 + 12"},
//                 {"role": "tool", "content": "1788"},
//                 {"role": "assistant", "content": "ANSWER 1788"}]}
//
// laid out as an actor lays out an episode: each "user" or "tool" message is an environment
// turn in the job's turn format (prompt, never trained on), each "assistant" message the
// policy's turn (its tokens and the format's stop token, trained on). The roles must alternate,
// starting with an environment turn and ending with the assistant's.
//
// Every line is checked when the file is read, before any training, and an error names the file,
// the line and what to fix: text that is not JSON, a missing or mistyped field, another role
// ("system" included: the job's turn format decides what opens an episode), two environment
// turns in a row, an assistant turn longer than actor.max_new_tokens (the policy could never
// produce it) or a conversation longer than the model's max_seq_len. Blank lines are skipped.
#ifndef FLYWHEEL_RUNTIME_SFT_CONVERSATIONS_H_
#define FLYWHEEL_RUNTIME_SFT_CONVERSATIONS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/trajectory.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/runtime/policy_text.h"

namespace flywheel {

// Appends one exchange to `t` as an actor lays it out: `observation` as the environment's turn
// in the job's turn format (prompt), then `action`'s tokens as generated, ending with the stop
// token or cut at actor.max_new_tokens as the engine cuts a turn (log μ = 0: "chosen with
// certainty"). An action longer than actor.max_new_tokens is an error: the policy could never
// produce it. Shared by the expert's episodes and the conversation file.
absl::Status AppendExchange(const JobConfig& config, const PolicyText& text,
                            std::string_view observation, std::string_view action, Trajectory& t);

absl::StatusOr<std::vector<Trajectory>> ReadSftConversations(const std::string& path,
                                                             const JobConfig& config,
                                                             const PolicyText& text,
                                                             int64_t max_seq_len);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_SFT_CONVERSATIONS_H_
