// String building for messages. Debian's abseil is built with its own absl::string_view (not
// std::string_view), so absl::StrCat does not take std::string_view arguments; flywheel code
// uses std::string_view and formats through fmt, which this header teaches absl::string_view.
#ifndef FLYWHEEL_CORE_STRINGS_H_
#define FLYWHEEL_CORE_STRINGS_H_

#include <iterator>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

#if !ABSL_USES_STD_STRING_VIEW
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<std::string_view> {
  template <typename FormatContext>
  auto format(absl::string_view s, FormatContext& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(s.data(), s.size()), ctx);
  }
};
#endif

// "INVALID_ARGUMENT: message" (or "OK").
template <>
struct fmt::formatter<absl::Status> : fmt::formatter<std::string_view> {
  template <typename FormatContext>
  auto format(const absl::Status& s, FormatContext& ctx) const {
    const std::string text = s.ToString();
    return fmt::formatter<std::string_view>::format(text, ctx);
  }
};

namespace flywheel {

// Concatenates anything fmt can format: StrCat("step ", 41, ": ", status.message()).
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (fmt::format_to(std::back_inserter(out), "{}", args), ...);
  return out;
}

// Joins the elements of a range with `separator`: Join(names, ", ").
template <typename Range>
std::string Join(const Range& range, std::string_view separator) {
  return fmt::format("{}", fmt::join(range, separator));
}
template <typename It>
std::string Join(It begin, It end, std::string_view separator) {
  return fmt::format("{}", fmt::join(begin, end, separator));
}

inline std::string_view ToStd(absl::string_view s) { return {s.data(), s.size()}; }
inline absl::string_view ToAbsl(std::string_view s) { return {s.data(), s.size()}; }

}  // namespace flywheel

#endif  // FLYWHEEL_CORE_STRINGS_H_
