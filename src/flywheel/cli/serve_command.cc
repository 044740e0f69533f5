// flywheel serve buffer [--config FILE] [--set k=v …] [--address HOST:PORT] [--auth-token-file F]
//                      [--tls-cert F --tls-key F [--tls-client-ca F]] [--insecure]
//                      [--metrics-listen HOST:PORT]
//
// Runs the trajectory buffer as a gRPC server until SIGINT or SIGTERM. The first line on
// stdout says where it listens ("flywheel: buffer serving on 127.0.0.1:7300 …"), so scripts
// and tests can start it on port 0 and read the port back. TLS files may also come from the
// config (buffer.tls_cert, buffer.tls_key, buffer.tls_client_ca), as its address does; a flag
// wins over its key.
#include <spdlog/spdlog.h>

#include <csignal>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "flywheel/buffer/buffer.h"
#include "flywheel/buffer/service.h"
#include "flywheel/cli/command.h"
#include "flywheel/cli/metrics_listen.h"
#include "flywheel/cli/security_flags.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel::cli {
namespace {

struct ServeArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string address;
  SecurityFlags security;
  MetricsListenFlag metrics;
};

int ServeBuffer(const ServeArgs& args) {
  JobConfig job;
  if (!args.config.empty()) {
    auto loaded = LoadJobConfig(args.config, args.overrides);
    if (!loaded.ok()) return ReportError(loaded.status());
    job = std::move(*loaded);
  } else if (!args.overrides.empty()) {
    return ReportError(absl::InvalidArgumentError("--set needs --config FILE"));
  }
  BufferOptions options = job.buffer;
  if (!args.address.empty()) options.address = args.address;
  BufferServerOptions server_options = BufferServerOptions::FromConfig(options);
  RpcSecurityFiles files = args.security.files;
  // A key of the config names its file where the flag was not given.
  for (auto [file, key, value] : {std::tuple{&files.tls_cert, "buffer.tls_cert", options.tls_cert},
                                  {&files.tls_key, "buffer.tls_key", options.tls_key},
                                  {&files.tls_client_ca, "buffer.tls_client_ca",
                                   options.tls_client_ca}}) {
    if (!file->given() && !value.empty()) *file = SettingFile{value, key};
  }
  auto security = LoadRpcSecurity(files);
  if (!security.ok()) return ReportError(security.status());
  server_options.security = *std::move(security);
  // Block the stop signals before any thread starts, then wait for one synchronously.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  auto metrics = args.metrics.Start();  // its threads block the stop signals too
  if (!metrics.ok()) return ReportError(metrics.status());

  auto buffer = Buffer::Create(options);
  if (!buffer.ok()) return ReportError(buffer.status());
  const BufferInfo info = (*buffer)->Info();
  auto server = BufferServer::Start(std::shared_ptr<Buffer>(std::move(*buffer)), server_options);
  if (!server.ok()) return ReportError(server.status());
  std::cout << "flywheel: buffer serving on " << (*server)->address()
            << " (durable=" << (options.durable ? "true" : "false")
            << ", recovered=" << info.recovered << ", size=" << info.table.size
            << ", auth=" << (server_options.security.auth_token.empty() ? "off" : "on")
            << ", tls=" << server_options.security.ServerTlsMode() << ")" << std::endl;
  spdlog::info("{}", (*server)->buffer().DebugString());
  int signal = 0;
  sigwait(&stop_signals, &signal);
  spdlog::info("buffer: signal {}, shutting down", signal);
  (*server)->Shutdown();
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app, Invocation& invocation) {
  CLI::App* serve = app.add_subcommand("serve", "Run a flywheel service");
  serve->require_subcommand(1);
  auto args = std::make_shared<ServeArgs>();
  CLI::App* buffer = serve->add_subcommand(
      "buffer", "Serve the trajectory buffer over gRPC (the [buffer] section of the config)");
  buffer->add_option("--config", args->config, "job config (TOML); defaults without it");
  buffer->add_option("--set", args->overrides, "override a key, e.g. --set buffer.durable=true")
      ->take_all();
  buffer->add_option("--address", args->address,
                     "listen address (default buffer.address, 127.0.0.1:7300; port 0 = any)");
  args->security.AddToken(buffer, "require this token (first line of the file) from every client");
  args->security.AddServerTls(buffer, "the buffer");
  args->metrics.Add(buffer);
  buffer->callback([args, &invocation] { invocation.run = [args] { return ServeBuffer(*args); }; });
  AddServeGatewayCommand(serve, invocation);
}

}  // namespace flywheel::cli
