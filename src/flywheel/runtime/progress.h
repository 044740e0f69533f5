// Training progress on the terminal: one status line refreshed in place when the output is a
// terminal, plain log lines at a fixed interval otherwise (CI logs, files, pipes).
#ifndef FLYWHEEL_RUNTIME_PROGRESS_H_
#define FLYWHEEL_RUNTIME_PROGRESS_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace flywheel {

struct ProgressSnapshot {
  int64_t step = 0;
  int64_t max_steps = 0;
  double reward = 0;
  double success = 0;
  double learner_utilization = 0;
  double mean_lag = 0;
  double buffer_fill = 0;  // size / capacity
  double tokens_per_s = 0;
  double elapsed_seconds = 0;
  // run.max_wall_seconds, counted from the same start as elapsed_seconds; 0 = no limit. The
  // eta is the sooner of the steps left at the rate so far and the wall time left.
  double max_wall_seconds = 0;
};

std::string FormatProgress(const ProgressSnapshot& s);

// Not thread-safe: one reporter, called from the thread that owns the training loop.
class ProgressReporter {
 public:
  ProgressReporter(std::FILE* out, bool is_terminal, absl::Duration log_interval);
  // For stdout: a terminal gets the refreshing line.
  static ProgressReporter ForStdout(absl::Duration log_interval = absl::Seconds(10));

  void Update(const ProgressSnapshot& snapshot, absl::Time now = absl::Now());
  // Ends the refreshing line so later output starts on a fresh line.
  void Finish();

 private:
  std::FILE* out_;
  bool is_terminal_;
  absl::Duration log_interval_;
  absl::Time last_log_ = absl::InfinitePast();
  bool line_open_ = false;
};

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_PROGRESS_H_
