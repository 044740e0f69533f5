// Admission control between producers (inserts) and the consumer (samples), with the semantics
// of DeepMind Reverb's RateLimiter: it tracks `diff = inserts * samples_per_insert - samples`
// and allows an insert while diff stays <= max_diff and a sample while diff stays >= min_diff,
// and no sample before the table holds min_size_to_sample items.
//
//   SampleToInsertRatio(spi, min_size, error_buffer):  min/max_diff = spi*min_size -/+ error_buffer
//   Queue(size):                                       spi = 1, min_diff = 0, max_diff = size
//
// Not thread-safe: the Table calls it under its own mutex and does the blocking (await), so
// that the check and the commit happen under one lock.
#ifndef FLYWHEEL_BUFFER_RATE_LIMITER_H_
#define FLYWHEEL_BUFFER_RATE_LIMITER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace flywheel {

struct RateLimiterOptions {
  double samples_per_insert = 1.0;
  int64_t min_size_to_sample = 1;
  double min_diff = 0;
  double max_diff = 1;

  static RateLimiterOptions SampleToInsertRatio(double samples_per_insert,
                                                int64_t min_size_to_sample, double error_buffer);
  static RateLimiterOptions Queue(int64_t size);

  // Refuses windows that can block both sides at once (Reverb: max_diff - min_diff must be at
  // least 2 * max(1, samples_per_insert)).
  absl::Status Validate() const;
};

class RateLimiter {
 public:
  explicit RateLimiter(const RateLimiterOptions& options) : options_(options) {}

  // `table_size` counts items held plus inserts reserved but not yet committed.
  bool CanInsert(int64_t table_size, int64_t num_inserts = 1) const;
  bool CanSample(int64_t table_size, int64_t num_samples = 1) const;

  void Insert(int64_t n = 1) { inserts_ += n; }
  void Sample(int64_t n = 1) { samples_ += n; }
  // An insert reservation that was not committed.
  void CancelInsert(int64_t n = 1) { inserts_ -= n; }

  int64_t inserts() const { return inserts_; }
  int64_t samples() const { return samples_; }
  // After a restart of a durable buffer.
  void Restore(int64_t inserts, int64_t samples) {
    inserts_ = inserts;
    samples_ = samples;
  }
  const RateLimiterOptions& options() const { return options_; }
  std::string DebugString() const;

 private:
  const RateLimiterOptions options_;
  int64_t inserts_ = 0;
  int64_t samples_ = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_RATE_LIMITER_H_
