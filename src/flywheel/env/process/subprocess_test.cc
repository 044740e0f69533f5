#include "flywheel/env/process/subprocess.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/time/clock.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

TEST(SubprocessTest, LinesInAndOut) {
  auto p = Subprocess::Start({"cat"});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE((*p)->WriteLine("hello").ok());
  ASSERT_TRUE((*p)->WriteLine("world").ok());
  EXPECT_EQ(*(*p)->ReadLine(absl::Now() + absl::Seconds(5), 1024), "hello");
  EXPECT_EQ(*(*p)->ReadLine(absl::Now() + absl::Seconds(5), 1024), "world");
  auto none = (*p)->ReadLine(absl::Now() + absl::Milliseconds(100), 1024);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(SubprocessTest, ExitStatusAndStderrTail) {
  auto p = Subprocess::Start({"sh", "-c", "echo last-line; echo oops >&2; exit 4"});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*(*p)->ReadLine(absl::Now() + absl::Seconds(5), 1024), "last-line");
  auto eof = (*p)->ReadLine(absl::Now() + absl::Seconds(5), 1024);
  EXPECT_EQ(eof.status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE((*p)->WaitExit(absl::Now() + absl::Seconds(5)));
  EXPECT_EQ((*p)->ExitDescription(), "exited with code 4");
  EXPECT_EQ((*p)->StderrTail(), "oops");
}

TEST(SubprocessTest, WriteToAProcessThatStoppedReadingHasADeadline) {
  auto p = Subprocess::Start({"sleep", "30"});
  ASSERT_TRUE(p.ok());
  const std::string big(1 << 20, 'x');  // more than a pipe buffer
  const absl::Status s = (*p)->WriteLine(big, absl::Milliseconds(200));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  (*p)->Kill();
  EXPECT_THAT((*p)->ExitDescription(), HasSubstr("killed by signal 9"));
}

TEST(SubprocessTest, WriteToAnExitedProcessFailsWithoutKillingUs) {
  auto p = Subprocess::Start({"true"});
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->WaitExit(absl::Now() + absl::Seconds(5)));
  EXPECT_EQ((*p)->WriteLine("anyone?").code(), absl::StatusCode::kUnavailable);  // EPIPE
}

TEST(SubprocessTest, LongLineIsResourceExhausted) {
  auto p = Subprocess::Start({"sh", "-c", "head -c 100000 /dev/zero | tr '\\\\0' x; echo"});
  ASSERT_TRUE(p.ok());
  auto line = (*p)->ReadLine(absl::Now() + absl::Seconds(5), 1000);
  EXPECT_EQ(line.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(SubprocessTest, MissingProgramIsNotFound) {
  auto p = Subprocess::Start({"/nonexistent/program"});
  EXPECT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("/nonexistent/program"));
}

}  // namespace
}  // namespace flywheel
