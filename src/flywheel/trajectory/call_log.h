// The JSONL form of recorded agent executions (docs/trajectory-processor.md): one JSON object
// per line, either an LLM call or the outcome of an execution.
//
//   {"type":"call","execution_id":"e1","call_id":"c1","role":"main","context":[1,5,9],
//    "generated":[12,13],"logprobs":[-0.2,-1.1],"versions":[7,7],
//    "start_unix_ns":1,"end_unix_ns":2}
//   {"type":"execution","execution_id":"e1","group_id":"g1","task_id":"repair/3",
//    "env_name":"repair","termination":"timeout","partial_score":0.4}
//
// Calls of one execution may be interleaved with other executions' lines; the execution line
// may come before or after its calls.
#ifndef FLYWHEEL_TRAJECTORY_CALL_LOG_H_
#define FLYWHEEL_TRAJECTORY_CALL_LOG_H_

#include <istream>
#include <ostream>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/trajectory/llm_call.h"

namespace flywheel {

// Reads every execution; an error names the source, the line number and the field.
// Executions come back in order of first appearance, each validated.
absl::StatusOr<std::vector<Execution>> ReadCallLog(std::istream& in, std::string_view source);

void WriteCallLog(const std::vector<Execution>& executions, std::ostream& out);

}  // namespace flywheel

#endif  // FLYWHEEL_TRAJECTORY_CALL_LOG_H_
