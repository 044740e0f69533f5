// Reaching another flywheel process (the buffer, the learner's weights service) when it may
// not be up yet or may be restarting: retry a cheap probe until a deadline, then fail naming
// the service and its address, so "connection refused" says which flag to fix.
#ifndef FLYWHEEL_RUNTIME_REMOTE_CONNECT_H_
#define FLYWHEEL_RUNTIME_REMOTE_CONNECT_H_

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace flywheel {

// Failures worth retrying: the peer is not (yet) reachable or did not answer in time.
bool IsTransient(const absl::Status& status);

// Calls `probe` until it succeeds. A transient failure is retried every `retry_every` until
// `timeout` has passed, then returned as UNAVAILABLE "cannot reach the <service> at <address>
// within N s: <last error>"; any other failure (a wrong auth token, say) is returned at once.
// `cancel` (optional) ends the wait early with CANCELLED.
absl::Status WaitForService(const std::string& service, const std::string& address,
                            absl::Duration timeout, const std::function<absl::Status()>& probe,
                            const std::atomic<bool>* cancel = nullptr,
                            absl::Duration retry_every = absl::Milliseconds(250));

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_REMOTE_CONNECT_H_
