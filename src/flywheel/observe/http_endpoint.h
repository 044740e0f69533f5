// A small HTTP server on its own threads for what people and tools read from a running process:
// Prometheus' /metrics, the live dashboard. Not for the data path (that is gRPC).
//
//   auto endpoint = HttpEndpoint::Start("127.0.0.1:9400", "--metrics-listen",
//                                       {{"/metrics", kPrometheusContentType, [] { ... }}});
//   (*endpoint)->address();  // "127.0.0.1:9400" (the bound port when 0 was asked for)
//
// Handlers run on the server's threads, concurrently with the job: they must only read state
// that is safe to read from another thread (registry atomics, a copy taken under a lock).
// Unknown paths answer 404 with the list of paths served.
#ifndef FLYWHEEL_OBSERVE_HTTP_ENDPOINT_H_
#define FLYWHEEL_OBSERVE_HTTP_ENDPOINT_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace flywheel {

struct HttpRoute {
  std::string path;          // exact match, e.g. "/metrics"
  std::string content_type;  // e.g. "text/plain; version=0.0.4; charset=utf-8"
  std::function<std::string()> body;
};

// Binds `server` to `address` (HOST:PORT; port 0 picks a free one), runs its accept loop on
// `thread` and returns the HOST:PORT bound; `flag` names the address in errors. The caller
// stops the server and joins the thread. For servers with routes of their own (the gateway).
absl::StatusOr<std::string> ListenInBackground(httplib::Server& server, const std::string& address,
                                               std::string_view flag, std::thread& thread);

class HttpEndpoint {
 public:
  // Binds `address` (HOST:PORT; port 0 picks a free one) and serves `routes` until destroyed.
  // `flag` names the address in errors ("--metrics-listen '…': address in use").
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& address,
                                                             std::string_view flag,
                                                             std::vector<HttpRoute> routes);
  ~HttpEndpoint();  // stops serving and joins the server thread

  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // HOST:PORT actually bound.
  const std::string& address() const { return address_; }

 private:
  HttpEndpoint() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string address_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_OBSERVE_HTTP_ENDPOINT_H_
