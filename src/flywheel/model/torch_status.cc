#include "flywheel/model/torch_status.h"

#include "flywheel/core/strings.h"

namespace flywheel {

absl::Status StatusFromTorchError(std::string_view context, const c10::Error& error) {
  // what_without_backtrace() keeps the message readable; the C++ backtrace is noise for users.
  std::string_view message = error.what_without_backtrace();
  while (!message.empty() && message.back() == '\n') message.remove_suffix(1);
  // Shape and dtype mismatches (IndexError, ValueError in torch terms) are the caller's input.
  const bool caller_error = dynamic_cast<const c10::IndexError*>(&error) != nullptr ||
                            dynamic_cast<const c10::ValueError*>(&error) != nullptr ||
                            dynamic_cast<const c10::TypeError*>(&error) != nullptr;
  const std::string text = StrCat(context, ": ", message);
  return caller_error ? absl::InvalidArgumentError(text) : absl::InternalError(text);
}

absl::Status StatusFromException(std::string_view context, const std::exception& error) {
  return absl::InternalError(StrCat(context, ": ", error.what()));
}

}  // namespace flywheel
