// flywheel serve gateway JOB.toml [--set k=v …] [--address HOST:PORT] [--record FILE]
//                                  [--auth-token-file F]
//
// Serves the job's policy (model.path's weights, or the initial model of model.seed) behind an
// OpenAI-compatible API until SIGINT or SIGTERM, with the job's tokenizer, chat template or turn
// format, and [sampling] as the requests' defaults; the job's environment plays the agents'
// tasks and scores them (/{id}/env/…); finished executions are appended to
// --record (gateway.record) as a JSONL call log (docs/agents.md). The first line on stdout says
// where it listens ("flywheel: gateway serving on 127.0.0.1:8400 …"), so scripts and tests can
// start it on port 0 and read the port back.
#include <spdlog/spdlog.h>

#include <csignal>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "flywheel/cli/command.h"
#include "flywheel/cli/security_flags.h"
#include "flywheel/core/clock.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/gateway/gateway_server.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/policy_text.h"
#include "flywheel/trajectory/call_log.h"

namespace flywheel::cli {
namespace {

struct GatewayArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string address;
  std::string record;
  SecurityFlags security;
};

// Appends each finished execution to a JSONL call log, whole and flushed, one writer at a time.
class CallLogFile {
 public:
  static absl::StatusOr<std::unique_ptr<CallLogFile>> Open(const std::string& path) {
    auto file = std::unique_ptr<CallLogFile>(new CallLogFile(path));
    if (!file->out_) {
      return absl::InvalidArgumentError(StrCat("gateway.record '", path, "': cannot open it"));
    }
    return file;
  }
  absl::Status Append(const Execution& execution) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    WriteCallLog({execution}, out_);
    out_.flush();
    if (!out_) return absl::DataLossError(StrCat("gateway.record '", path_, "': write failed"));
    return absl::OkStatus();
  }

 private:
  explicit CallLogFile(const std::string& path) : path_(path), out_(path, std::ios::app) {}
  const std::string path_;
  absl::Mutex mu_;
  std::ofstream out_ ABSL_GUARDED_BY(mu_);
};

absl::Status ServeGateway(const GatewayArgs& args) {
  ASSIGN_OR_RETURN(JobConfig job, LoadJobConfig(args.config, args.overrides));
  GatewayOptions options = job.gateway;
  if (!args.address.empty()) options.address = args.address;
  if (!args.record.empty()) options.record = args.record;
  ASSIGN_OR_RETURN(const RpcSecurity security, args.security.Load());

  // Environments wait their latency models on the wall clock, as a step in training would take.
  ASSIGN_OR_RETURN(std::unique_ptr<EnvFactory> factory, EnvFactory::Create(job.env, RealClock()));
  ASSIGN_OR_RETURN(const PolicyText text, MakePolicyText(job, *factory));
  ASSIGN_OR_RETURN(const ModelOptions model_options,
                   ResolveModelOptions(job, *text.tokenizer, text.tokenizer_name));
  ASSIGN_OR_RETURN(const Transformer model, MakeInitialModel(model_options));
  ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> snapshot, MakeSnapshot(model, 0));
  ASSIGN_OR_RETURN(std::unique_ptr<RolloutEngine> engine,
                   RolloutEngine::Create(job.actor.engine, snapshot));
  ASSIGN_OR_RETURN(std::unique_ptr<gateway::PromptRenderer> renderer,
                   gateway::PromptRenderer::Create(text.tokenizer.get(), text.chat_template.get(),
                                                   text.turn_format.get()));
  std::unique_ptr<CallLogFile> log;
  if (!options.record.empty()) {
    ASSIGN_OR_RETURN(log, CallLogFile::Open(options.record));
  }
  gateway::EnvSessions env(factory.get());
  gateway::ExecutionRegistry executions(
      [&log](Execution e) { return log != nullptr ? log->Append(e) : absl::OkStatus(); });

  // Block the stop signals before any thread starts, then wait for one synchronously.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ASSIGN_OR_RETURN(
      std::unique_ptr<gateway::GenerationLoop> loop,
      gateway::GenerationLoop::Start(std::move(engine), {.max_sequences = options.max_sequences}));
  ASSIGN_OR_RETURN(std::unique_ptr<gateway::GatewayServer> server,
                   gateway::GatewayServer::Start(options, {.loop = loop.get(),
                                                           .executions = &executions,
                                                           .env = &env,
                                                           .renderer = renderer.get(),
                                                           .sampling = job.sampling,
                                                           .admin_token = security.auth_token}));
  std::cout << "flywheel: gateway serving on " << server->address() << " (model "
            << server->model_name() << ", " << renderer->prompt_format() << ", tool calls "
            << gateway::ToolCallFormatName(renderer->tool_call_format()) << ", environment "
            << factory->task_name()
            << ", record=" << (options.record.empty() ? "off" : options.record)
            << ", auth=" << (security.auth_token.empty() ? "executions" : "executions+admin") << ")"
            << std::endl;
  int signal = 0;
  sigwait(&stop_signals, &signal);
  const gateway::GatewayCounts counts = server->counts();
  const gateway::ExecutionCounts recorded = executions.counts();
  spdlog::info(
      "gateway: signal {}, shutting down ({} requests, {} refused, {} abandoned, {} busy; {} "
      "executions opened, {} finished, {} expired, {} dropped, {} calls; contexts {} matched by "
      "text, {} re-rendered)",
      signal, counts.requests, counts.refused, counts.abandoned, counts.busy, recorded.opened,
      recorded.finished, counts.expired, recorded.dropped, recorded.calls, counts.contexts_matched,
      counts.contexts_rerendered);
  server.reset();
  loop.reset();
  return absl::OkStatus();
}

}  // namespace

void AddServeGatewayCommand(CLI::App* serve, Invocation& invocation) {
  auto args = std::make_shared<GatewayArgs>();
  CLI::App* gateway = serve->add_subcommand(
      "gateway",
      "Serve the job's policy to agents through an OpenAI-compatible API, recording "
      "every call into its execution ([gateway] of the config)");
  gateway->add_option("config", args->config, "job config (TOML)")->required();
  gateway->add_option("--set", args->overrides, "override a key, e.g. --set gateway.max_n=4")
      ->take_all();
  gateway->add_option("--address", args->address,
                      "listen address (default gateway.address, 127.0.0.1:8400; port 0 = any)");
  gateway->add_option("--record", args->record,
                      "append finished executions to this JSONL call log (gateway.record)");
  args->security.AddToken(gateway,
                          "require this token (first line of the file) to open executions");
  gateway->callback([args, &invocation] {
    invocation.run = [args] {
      const absl::Status status = ServeGateway(*args);
      return status.ok() ? 0 : ReportError(status);
    };
  });
}

}  // namespace flywheel::cli
