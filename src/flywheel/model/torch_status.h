// The boundary between torch's exceptions and flywheel's Status: every call into LibTorch that
// may throw goes through TorchCall, which names what was being done.
//
//   RETURN_IF_ERROR(TorchCall("learner step 41: forward", [&] { logits = model->forward(x); }));
#ifndef FLYWHEEL_MODEL_TORCH_STATUS_H_
#define FLYWHEEL_MODEL_TORCH_STATUS_H_

#include <exception>
#include <string_view>
#include <type_traits>
#include <utility>

#include <c10/util/Exception.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flywheel {

// Converts a caught torch (or standard) exception into a Status prefixed with `context`.
absl::Status StatusFromTorchError(std::string_view context, const c10::Error& error);
absl::Status StatusFromException(std::string_view context, const std::exception& error);

template <typename F>
absl::Status TorchCall(std::string_view context, F&& fn) {
  try {
    std::forward<F>(fn)();
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    return StatusFromTorchError(context, e);
  } catch (const std::exception& e) {
    return StatusFromException(context, e);
  }
}

// As TorchCall, for a function that returns a value.
template <typename F, typename R = std::invoke_result_t<F>>
absl::StatusOr<R> TorchCallOr(std::string_view context, F&& fn) {
  try {
    return std::forward<F>(fn)();
  } catch (const c10::Error& e) {
    return StatusFromTorchError(context, e);
  } catch (const std::exception& e) {
    return StatusFromException(context, e);
  }
}

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_TORCH_STATUS_H_
