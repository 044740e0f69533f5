#include "flywheel/runtime/progress.h"

#include <cstdio>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace flywheel {
namespace {

using ::testing::HasSubstr;

std::string Capture(bool terminal, const std::vector<std::pair<int, double>>& steps_at) {
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  ProgressReporter reporter(out, terminal, absl::Seconds(10));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  for (const auto& [step, at] : steps_at) {
    ProgressSnapshot s;
    s.step = step;
    s.max_steps = 10;
    s.elapsed_seconds = at;
    reporter.Update(s, t0 + absl::Seconds(at));
  }
  reporter.Finish();
  std::fclose(out);
  std::string text(buffer, size);
  std::free(buffer);
  return text;
}

TEST(ProgressTest, LineHasTheFields) {
  ProgressSnapshot s{.step = 5, .max_steps = 10, .reward = 0.25, .success = 0.5,
                     .learner_utilization = 0.97, .mean_lag = 1.5, .buffer_fill = 0.4,
                     .tokens_per_s = 1234, .elapsed_seconds = 50};
  const std::string line = FormatProgress(s);
  EXPECT_THAT(line, HasSubstr("step 5/10"));
  EXPECT_THAT(line, HasSubstr("reward 0.250"));
  EXPECT_THAT(line, HasSubstr("learner 97%"));
  EXPECT_THAT(line, HasSubstr("eta 0m50s"));
}

// A run bounded by run.max_wall_seconds ends when that runs out, whatever run.max_steps says.
TEST(ProgressTest, EtaIsTheSoonerOfStepsAndWallTime) {
  ProgressSnapshot s{
      .step = 10, .max_steps = 100000, .elapsed_seconds = 60, .max_wall_seconds = 600};
  EXPECT_THAT(FormatProgress(s), HasSubstr("eta 9m00s"));
  s.max_steps = 20;  // 60 s more at this rate: sooner than the wall budget
  EXPECT_THAT(FormatProgress(s), HasSubstr("eta 1m00s"));
  s.elapsed_seconds = 0;  // no rate and no clock yet
  EXPECT_THAT(FormatProgress(s), HasSubstr("eta ?"));
}

TEST(ProgressTest, TerminalRefreshesInPlace) {
  const std::string out = Capture(true, {{1, 1}, {2, 2}, {3, 3}});
  EXPECT_EQ(std::count(out.begin(), out.end(), '\r'), 3);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1);  // only Finish ends the line
}

TEST(ProgressTest, PipeGetsPeriodicLines) {
  // logged at 0 s, skipped at 5 s, logged at 12 s, and the last step always
  const std::string out = Capture(false, {{1, 0}, {2, 5}, {3, 12}, {10, 13}});
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3);
  EXPECT_THAT(out, HasSubstr("step 3/10"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("step 2/10")));
}

}  // namespace
}  // namespace flywheel
