// "HOST:PORT" addresses, as every --*-listen flag and peer address takes them.
#ifndef FLYWHEEL_CORE_HOST_PORT_H_
#define FLYWHEEL_CORE_HOST_PORT_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace flywheel {

// "HOST:PORT" (a port of 0..65535; "[::1]:29500" for IPv6) into its parts. `what` names the
// address in the error ("rendezvous address '…': no port (expected HOST:PORT)").
absl::Status ParseHostPort(const std::string& address, std::string* host, int* port,
                           std::string_view what = "address");

}  // namespace flywheel

#endif  // FLYWHEEL_CORE_HOST_PORT_H_
