#include "flywheel/env/process/env_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/core/strings.h"
#include "flywheel/env/test_util.h"

namespace flywheel {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

EnvCheckReport Check(const std::string& script, std::vector<std::string> args = {}) {
  std::vector<std::string> command = {"python3", testing::SourcePath(script)};
  command.insert(command.end(), args.begin(), args.end());
  EnvCheckOptions options;
  options.timeout_seconds = 3;
  return CheckEnvironment(command, options);
}

TEST(EnvCheckTest, TheExampleEnvironmentPasses) {
  const EnvCheckReport report = Check("examples/envs/guess_env.py");
  EXPECT_TRUE(report.ok()) << Join(report.violations, "\n");
  EXPECT_THAT(report.passed, Contains(HasSubstr("close: exited with code 0")));
  EXPECT_THAT(report.passed, Contains(HasSubstr("same seed gives the same")));
}

TEST(EnvCheckTest, TheBrokenExampleFailsNamingEachViolation) {
  const EnvCheckReport report = Check("examples/envs/broken/bad_protocol_env.py");
  ASSERT_FALSE(report.ok());
  const std::string all = Join(report.violations, "\n");
  EXPECT_THAT(all, HasSubstr("protocol_version 0"));
  EXPECT_THAT(all, HasSubstr("no boolean \"done\""));
  EXPECT_THAT(all, HasSubstr("the process died"));
}

TEST(EnvCheckTest, CrashAndHangAreViolations) {
  // The misbehaving environment plays well until the action "boom" (random play never sends
  // it) but dies on a request line that is not JSON instead of answering an error.
  const EnvCheckReport misbehaving =
      Check("examples/envs/broken/misbehaving_env.py", {"--fault", "crash"});
  ASSERT_EQ(misbehaving.violations.size(), 1u) << Join(misbehaving.violations, "\n");
  EXPECT_THAT(misbehaving.violations[0],
              HasSubstr("a request line that is not JSON: the process died"));
  EnvCheckOptions options;
  options.timeout_seconds = 0.5;
  const EnvCheckReport hang = CheckEnvironment({"sleep", "30"}, options);
  ASSERT_FALSE(hang.ok());
  EXPECT_THAT(hang.violations[0], HasSubstr("hello: no reply within 0.5 s"));
  const EnvCheckReport missing = CheckEnvironment({"/nonexistent/env"}, options);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.violations[0], HasSubstr("/nonexistent/env"));
}

}  // namespace
}  // namespace flywheel
