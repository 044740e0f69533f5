#include "flywheel/runtime/progress.h"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

namespace flywheel {
namespace {

std::string FormatEta(double seconds) {
  if (seconds < 0 || seconds > 1e7) return "?";
  const int64_t s = static_cast<int64_t>(seconds);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  return fmt::format("{}m{:02}s", s / 60, s % 60);
}

}  // namespace

std::string FormatProgress(const ProgressSnapshot& s) {
  double eta = s.step > 0 && s.elapsed_seconds > 0
                   ? s.elapsed_seconds / s.step * (s.max_steps - s.step)
                   : -1;
  if (s.max_wall_seconds > 0 && s.elapsed_seconds > 0) {
    const double wall_left = std::max(0.0, s.max_wall_seconds - s.elapsed_seconds);
    eta = eta < 0 ? wall_left : std::min(eta, wall_left);
  }
  return fmt::format(
      "step {}/{}  reward {:.3f}  success {:.2f}  learner {:.0f}%  lag {:.1f}  buffer {:.0f}%  "
      "{:.0f} tok/s  eta {}",
      s.step, s.max_steps, s.reward, s.success, 100 * s.learner_utilization, s.mean_lag,
      100 * s.buffer_fill, s.tokens_per_s, FormatEta(eta));
}

ProgressReporter::ProgressReporter(std::FILE* out, bool is_terminal, absl::Duration log_interval)
    : out_(out), is_terminal_(is_terminal), log_interval_(log_interval) {}

ProgressReporter ProgressReporter::ForStdout(absl::Duration log_interval) {
  return ProgressReporter(stdout, ::isatty(STDOUT_FILENO) == 1, log_interval);
}

void ProgressReporter::Update(const ProgressSnapshot& snapshot, absl::Time now) {
  const std::string line = FormatProgress(snapshot);
  if (is_terminal_) {
    // carriage return + erase line: the status line is rewritten in place
    std::fprintf(out_, "\r\x1b[2K%s", line.c_str());
    line_open_ = true;
  } else {
    const bool last = snapshot.max_steps > 0 && snapshot.step >= snapshot.max_steps;
    if (now - last_log_ < log_interval_ && !last) return;
    last_log_ = now;
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void ProgressReporter::Finish() {
  if (line_open_) std::fprintf(out_, "\n");
  line_open_ = false;
  std::fflush(out_);
}

}  // namespace flywheel
