// Status propagation macros in the style of Reverb's status_macros.h.
//
//   RETURN_IF_ERROR(table->Insert(item));
//   ASSIGN_OR_RETURN(auto batch, table->Sample(n, deadline));
//   RETURN_IF_ERROR(Load(path)) << "while loading " << path;  // not supported: use Annotate
#ifndef FLYWHEEL_CORE_STATUS_MACROS_H_
#define FLYWHEEL_CORE_STATUS_MACROS_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/core/strings.h"

namespace flywheel {

// Returns `status` with `context` prepended to its message ("learner step 41: forward: …"),
// keeping the code. OK stays OK.
inline absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), StrCat(context, ": ", status.message()));
}

}  // namespace flywheel

#define FLYWHEEL_STATUS_CONCAT_INNER_(a, b) a##b
#define FLYWHEEL_STATUS_CONCAT_(a, b) FLYWHEEL_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                                                  \
  do {                                                                         \
    const ::absl::Status flywheel_status_ = (expr);                            \
    if (ABSL_PREDICT_FALSE(!flywheel_status_.ok())) return flywheel_status_;   \
  } while (false)

#define FLYWHEEL_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                    \
  if (ABSL_PREDICT_FALSE(!statusor.ok())) {                   \
    return std::move(statusor).status();                      \
  }                                                           \
  lhs = std::move(statusor).value()

#define ASSIGN_OR_RETURN(lhs, rexpr) \
  FLYWHEEL_ASSIGN_OR_RETURN_IMPL_(   \
      FLYWHEEL_STATUS_CONCAT_(flywheel_statusor_, __LINE__), lhs, rexpr)

#endif  // FLYWHEEL_CORE_STATUS_MACROS_H_
