// The OpenAI-compatible HTTP server in front of the rollout engine. An agent written against the
// chat-completions API needs only a base URL and a key to generate with the policy being
// trained; every call it makes is recorded, token in / token out, into its execution.
//
//   POST /executions                         open an execution → {execution_id, token, base_url}
//                                            (the gateway's admin token, when it has one)
//   POST /{id}[/{role}]/v1/chat/completions  OpenAI chat (tools, n, stop, stream, logprobs)
//   POST /{id}[/{role}]/v1/completions       OpenAI text completion
//   GET  [/{id}]/v1/models                   the model, and how prompts are rendered
//   POST /{id}/env/reset, /{id}/env/step     the job's environment plays the execution's task
//                                            (env_sessions.h; when the gateway has one)
//   POST /{id}/finish                        {"reward"} | {"termination", "partial_score"}; with
//                                            an episode, {} and the environment's reward
//
// The execution may also be named by an X-Flywheel-Execution header on /v1/...; the role (main,
// sub-agent, main-summary, sub-agent-summary) by the path or an X-Flywheel-Role header. Calls
// carry the execution's token as `Authorization: Bearer <token>` (OPENAI_API_KEY to a client).
// Errors have OpenAI's shape, {"error": {"message", "type", "param", "code"}}, and status.
//
// Each HTTP request runs on a thread of the server's pool (one per concurrent request, up to
// gateway.max_concurrent_requests; more are answered 429) and waits on the generation loop,
// which batches every request's sequences together.
#ifndef FLYWHEEL_GATEWAY_GATEWAY_SERVER_H_
#define FLYWHEEL_GATEWAY_GATEWAY_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/gateway/env_sessions.h"
#include "flywheel/gateway/execution_registry.h"
#include "flywheel/gateway/gateway_options.h"
#include "flywheel/gateway/generation_loop.h"
#include "flywheel/gateway/prompt_renderer.h"

namespace httplib {
class Server;
class Request;
class Response;
}  // namespace httplib

namespace flywheel::gateway {

struct Call;  // one generation request on its way to its answer (gateway_server.cc)

struct GatewayCounts {
  int64_t requests = 0;
  int64_t refused = 0;    // answered with an error status
  int64_t abandoned = 0;  // the client left before its answer (nothing recorded)
  int64_t busy = 0;       // answered 429: gateway.max_concurrent_requests reached
  // Chat prompts continued from an earlier call's own tokens where its text re-tokenised
  // differently, and prompts no earlier call of the execution is a prefix of (context_match.h).
  int64_t contexts_matched = 0;
  int64_t contexts_rerendered = 0;
  // Executions ended by gateway.execution_budget_s (finished as timeouts, or dropped when there
  // was nothing to train on).
  int64_t expired = 0;
};

class GatewayServer {
 public:
  struct Parts {
    GenerationLoop* loop = nullptr;           // borrowed
    ExecutionRegistry* executions = nullptr;  // borrowed
    EnvSessions* env = nullptr;  // borrowed; null: no /env routes (agents report their rewards)
    const PromptRenderer* renderer = nullptr;  // borrowed
    SamplingParams sampling;                   // a request's defaults (the job's [sampling])
    std::string admin_token;                   // required by POST /executions when not empty
  };
  static absl::StatusOr<std::unique_ptr<GatewayServer>> Start(const GatewayOptions& options,
                                                              Parts parts);
  ~GatewayServer();  // stops serving; requests in flight end first

  GatewayServer(const GatewayServer&) = delete;
  GatewayServer& operator=(const GatewayServer&) = delete;

  const std::string& address() const { return address_; }
  std::string model_name() const;
  GatewayCounts counts() const;

 private:
  GatewayServer(const GatewayOptions& options, Parts parts);
  void Route();
  void OpenExecution(const httplib::Request& request, httplib::Response& response);
  // The body of a request to /{id}/…, once it carried the execution's token.
  absl::StatusOr<nlohmann::ordered_json> ExecutionBody(const httplib::Request& request);
  // Finishes an execution: with its episode's outcome when it played one (then closes the
  // episode), else with `reported`.
  absl::StatusOr<Execution> End(const std::string& execution_id, const ExecutionOutcome& reported);
  void FinishExecution(const httplib::Request& request, httplib::Response& response);
  void EnvCall(const httplib::Request& request, httplib::Response& response, bool reset);
  // Every execution past gateway.execution_budget_s ends as a timeout (its environment's partial
  // score) or, with nothing to train on, is dropped. Runs on reaper_ until the server stops.
  void ReapOverdue() ABSL_LOCKS_EXCLUDED(reaper_mu_);
  void Models(httplib::Response& response) const;
  void Generate(const httplib::Request& request, httplib::Response& response, bool chat);
  void Answer(Call& call, httplib::Response& response);
  void Stream(std::shared_ptr<Call> call, httplib::Response& response);
  // Each choice becomes one LLM call of the execution (siblings share their context).
  void Record(const Call& call);
  AssistantOutput Parse(const Call& call, size_t choice) const;
  nlohmann::ordered_json ChoiceJson(const Call& call, size_t choice) const;
  nlohmann::ordered_json Usage(const Call& call) const;

  const GatewayOptions options_;
  const Parts parts_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string address_;
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> requests_{0}, refused_{0}, abandoned_{0}, busy_{0};
  std::atomic<int64_t> contexts_matched_{0}, contexts_rerendered_{0}, expired_{0};
  absl::Mutex reaper_mu_;
  bool stopping_ ABSL_GUARDED_BY(reaper_mu_) = false;
  std::thread reaper_;
  std::atomic<int64_t> next_call_{1};
};

}  // namespace flywheel::gateway

#endif  // FLYWHEEL_GATEWAY_GATEWAY_SERVER_H_
