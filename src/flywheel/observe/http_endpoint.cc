#include "flywheel/observe/http_endpoint.h"

#include <httplib.h>

#include <chrono>
#include <memory>
#include <utility>

#include "flywheel/core/host_port.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {

absl::StatusOr<std::string> ListenInBackground(httplib::Server& server, const std::string& address,
                                               std::string_view flag, std::thread& thread) {
  std::string host;
  int port = 0;
  RETURN_IF_ERROR(ParseHostPort(address, &host, &port, flag));
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, with which a second process
  // would share a port in use instead of being refused.
  auto listening = std::make_shared<socket_t>(INVALID_SOCKET);
  server.set_socket_options([listening](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    *listening = sock;
  });
  const int bound = port == 0                         ? server.bind_to_any_port(host)
                    : server.bind_to_port(host, port) ? port
                                                      : -1;
  // httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into Debian's
  // library): 64 agents connecting at once overflow it, the kernel drops their SYNs and each
  // waits a second or more to retry. Listening again on the bound socket raises the backlog.
  if (bound > 0 && *listening != INVALID_SOCKET) ::listen(*listening, SOMAXCONN);
  if (bound <= 0) {
    return absl::UnavailableError(StrCat(flag, " '", address,
                                         "': cannot listen there (address in use, or not an "
                                         "address of this machine); give another HOST:PORT"));
  }
  thread = std::thread([&server] { server.listen_after_bind(); });
  // stop() only stops a server that is running: wait for the accept loop, so that a server
  // stopped at once does not leave it running (connections queue in the backlog meanwhile).
  while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return StrCat(host.find(':') == std::string::npos ? host : StrCat("[", host, "]"), ":", bound);
}

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(const std::string& address,
                                                                  std::string_view flag,
                                                                  std::vector<HttpRoute> routes) {
  std::unique_ptr<HttpEndpoint> endpoint(new HttpEndpoint);
  endpoint->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *endpoint->server_;
  // Two threads: scrapes and page loads are rare, and the default pool is 8 or more.
  server.new_task_queue = [] { return new httplib::ThreadPool(2); };
  std::string paths;
  for (HttpRoute& route : routes) {
    paths += (paths.empty() ? "" : ", ") + route.path;
    const std::string path = route.path;  // read before the lambda takes the route
    server.Get(path,
               [route = std::move(route)](const httplib::Request&, httplib::Response& response) {
                 response.set_content(route.body(), route.content_type);
               });
  }
  server.set_error_handler([paths](const httplib::Request& request, httplib::Response& response) {
    if (response.status != 404) return;
    response.set_content(StrCat("no ", request.path, " here; served: ", paths, "\n"),
                         "text/plain; charset=utf-8");
  });
  ASSIGN_OR_RETURN(endpoint->address_,
                   ListenInBackground(server, address, flag, endpoint->thread_));
  return endpoint;
}

HttpEndpoint::~HttpEndpoint() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace flywheel
