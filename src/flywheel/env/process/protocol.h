// The external environment protocol (docs/env-protocol.md): one JSON object per line on the
// environment's stdin (requests) and stdout (replies), strictly request → reply.
//
//   → {"type":"hello","protocol_version":1}
//   ←
//   {"type":"hello","protocol_version":1,"name":"guess","vocabulary":{"kind":"words","words":[…]}}
//   → {"type":"reset","task":"guess","seed":42}
//   ← {"type":"observation","observation":"go","reward":0,"done":false}
//   → {"type":"step","action":"7"}
//   ← {"type":"observation","observation":"higher","reward":0,"done":false,"partial_score":0.5}
//   → {"type":"score"}
//   ← {"type":"score","score":0.5}
//   → {"type":"close"}                       (no reply; the process exits with code 0)
// A request the environment cannot serve is answered {"type":"error","message":"…"}.
#ifndef FLYWHEEL_ENV_PROCESS_PROTOCOL_H_
#define FLYWHEEL_ENV_PROCESS_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "flywheel/env/interface.h"

namespace flywheel::protocol {

inline constexpr int kVersion = 1;

std::string HelloRequest();
// Seeds are sent below 2^53 so that every JSON implementation reads them exactly.
std::string ResetRequest(std::string_view task, uint64_t seed);
std::string StepRequest(std::string_view action);
std::string ScoreRequest();
std::string CloseRequest();

struct Hello {
  int version = 0;
  std::string name;
  VocabularySpec vocabulary;
};

// Parsers check every field. A malformed reply is INVALID_ARGUMENT whose message says what is
// wrong and quotes the line; an {"type":"error"} reply is FAILED_PRECONDITION with its message.
absl::StatusOr<Hello> ParseHello(std::string_view line);
absl::StatusOr<StepResult> ParseObservation(std::string_view line);
absl::StatusOr<double> ParseScore(std::string_view line);

// `line` cut to a readable length for messages, with its size when cut.
std::string Quote(std::string_view line);

}  // namespace flywheel::protocol

#endif  // FLYWHEEL_ENV_PROCESS_PROTOCOL_H_
