#include "flywheel/buffer/rate_limiter.h"

#include <algorithm>

#include "flywheel/core/strings.h"

namespace flywheel {

RateLimiterOptions RateLimiterOptions::SampleToInsertRatio(double samples_per_insert,
                                                           int64_t min_size_to_sample,
                                                           double error_buffer) {
  const double offset = samples_per_insert * static_cast<double>(min_size_to_sample);
  return {samples_per_insert, min_size_to_sample, offset - error_buffer, offset + error_buffer};
}

RateLimiterOptions RateLimiterOptions::Queue(int64_t size) {
  return {1.0, 1, 0.0, static_cast<double>(size)};
}

absl::Status RateLimiterOptions::Validate() const {
  if (!(samples_per_insert > 0)) {
    return absl::InvalidArgumentError(
        StrCat("rate limiter: samples_per_insert must be > 0 (got ", samples_per_insert, ")"));
  }
  if (min_size_to_sample < 1) {
    return absl::InvalidArgumentError(
        StrCat("rate limiter: min_size_to_sample must be >= 1 (got ", min_size_to_sample, ")"));
  }
  if (min_diff > max_diff) {
    return absl::InvalidArgumentError(
        StrCat("rate limiter: min_diff (", min_diff, ") > max_diff (", max_diff, ")"));
  }
  const double needed = 2 * std::max(1.0, samples_per_insert);
  if (max_diff - min_diff < needed) {
    return absl::InvalidArgumentError(
        StrCat("rate limiter: max_diff - min_diff = ", max_diff - min_diff, " is below ", needed,
               " = 2 * max(1, samples_per_insert): inserts and samples could both block "
               "forever; raise error_buffer to at least max(1, samples_per_insert)"));
  }
  return absl::OkStatus();
}

bool RateLimiter::CanInsert(int64_t table_size, int64_t num_inserts) const {
  // Until the table can be sampled at all, the ratio does not apply (Reverb).
  if (table_size + num_inserts <= options_.min_size_to_sample) return true;
  const double diff = static_cast<double>(inserts_ + num_inserts) * options_.samples_per_insert -
                      static_cast<double>(samples_);
  return diff <= options_.max_diff;
}

bool RateLimiter::CanSample(int64_t table_size, int64_t num_samples) const {
  if (table_size < options_.min_size_to_sample) return false;
  const double diff = static_cast<double>(inserts_) * options_.samples_per_insert -
                      static_cast<double>(samples_ + num_samples);
  return diff >= options_.min_diff;
}

std::string RateLimiter::DebugString() const {
  return StrCat("RateLimiter(samples_per_insert=", options_.samples_per_insert,
                ", min_size_to_sample=", options_.min_size_to_sample,
                ", min_diff=", options_.min_diff, ", max_diff=", options_.max_diff,
                ", inserts=", inserts_, ", samples=", samples_, ")");
}

}  // namespace flywheel
