#include "flywheel/core/host_port.h"

#include "absl/strings/numbers.h"
#include "flywheel/core/strings.h"

namespace flywheel {

absl::Status ParseHostPort(const std::string& address, std::string* host, int* port,
                           std::string_view what) {
  const auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        StrCat(what, " '", address, "': ", why, " (expected HOST:PORT)"));
  };
  std::string_view rest = address;
  std::string_view h;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("unclosed '['");
    h = rest.substr(1, close - 1);
    rest.remove_prefix(close + 1);
    if (rest.empty() || rest.front() != ':') return bad("no port");
    rest.remove_prefix(1);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) return bad("no port");
    h = rest.substr(0, colon);
    rest.remove_prefix(colon + 1);
  }
  int p = 0;
  if (h.empty()) return bad("no host");
  if (!absl::SimpleAtoi(ToAbsl(rest), &p) || p < 0 || p > 65535) return bad("bad port");
  *host = std::string(h);
  *port = p;
  return absl::OkStatus();
}

}  // namespace flywheel
