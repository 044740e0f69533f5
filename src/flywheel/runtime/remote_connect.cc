#include "flywheel/runtime/remote_connect.h"

#include "absl/time/clock.h"
#include "flywheel/core/strings.h"

namespace flywheel {

bool IsTransient(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

absl::Status WaitForService(const std::string& service, const std::string& address,
                            absl::Duration timeout, const std::function<absl::Status()>& probe,
                            const std::atomic<bool>* cancel, absl::Duration retry_every) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const absl::Status status = probe();
    if (status.ok() || !IsTransient(status)) return status;
    if (absl::Now() + retry_every > deadline) {
      return absl::UnavailableError(StrCat("cannot reach the ", service, " at ", address,
                                           " within ", absl::ToDoubleSeconds(timeout),
                                           " s: ", status.message()));
    }
    if (cancel != nullptr && cancel->load()) {
      return absl::CancelledError(
          StrCat("stopped while waiting for the ", service, " at ", address));
    }
    absl::SleepFor(retry_every);
  }
}

}  // namespace flywheel
