// Options of the OpenAI-compatible gateway; the [gateway] section of a job config. No torch: the
// config layer includes it.
#ifndef FLYWHEEL_GATEWAY_GATEWAY_OPTIONS_H_
#define FLYWHEEL_GATEWAY_GATEWAY_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "flywheel/core/strings.h"

namespace flywheel {

struct GatewayOptions {
  std::string address = "127.0.0.1:8400";
  std::string model_name;  // what /v1/models lists and responses name; empty: "flywheel"
  int64_t max_request_bytes = 4 << 20;
  int64_t max_concurrent_requests = 128;
  int64_t max_sequences = 64;  // sequences the engine decodes together
  int64_t max_tokens = 512;    // a request that sets no max_tokens generates at most this many
  int64_t max_n = 16;
  std::string record;             // append finished executions to this JSONL call log ("" = do not)
  double execution_budget_s = 0;  // an execution open longer is ended as a timeout (0 = never)

  template <typename V>
  void VisitFields(V& v) {
    v.Field("address", address, "HOST:PORT the gateway listens on (port 0 = any free one)");
    v.Field("model_name", model_name,
            "the model's name in /v1/models and responses (\"\" = flywheel)");
    v.Field("max_request_bytes", max_request_bytes, "largest request body accepted (413 above)");
    v.Field("max_concurrent_requests", max_concurrent_requests,
            "requests served at once; more are answered 429");
    v.Field("max_sequences", max_sequences, "sequences the rollout engine decodes together");
    v.Field("max_tokens", max_tokens, "tokens generated when a request sets no max_tokens");
    v.Field("max_n", max_n, "largest n (choices per request)");
    v.Field("record", record, "append every finished execution to this JSONL call log");
    v.Field("execution_budget_s", execution_budget_s,
            "seconds an execution may stay open; then it ends as a timeout, scored by its "
            "environment's partial score (0 = no budget)");
  }

  absl::Status Validate() const {
    if (max_request_bytes < 1024 || max_concurrent_requests < 1 || max_sequences < 1 ||
        max_tokens < 1 || max_n < 1 || !(execution_budget_s >= 0)) {
      return absl::InvalidArgumentError(
          StrCat("gateway: max_request_bytes must be >= 1024, max_concurrent_requests, "
                 "max_sequences, max_tokens, max_n >= 1 and execution_budget_s >= 0 (got ",
                 max_request_bytes, ", ", max_concurrent_requests, ", ", max_sequences, ", ",
                 max_tokens, ", ", max_n, ", ", execution_budget_s, ")"));
    }
    return absl::OkStatus();
  }
};

}  // namespace flywheel

#endif  // FLYWHEEL_GATEWAY_GATEWAY_OPTIONS_H_
