#include "flywheel/runtime/remote_connect.h"

#include <gtest/gtest.h>

namespace flywheel {
namespace {

TEST(RemoteConnectTest, RetriesTransientFailuresUntilTheServiceAnswers) {
  int calls = 0;
  absl::Status status = WaitForService(
      "buffer", "127.0.0.1:7300", absl::Seconds(10),
      [&] { return ++calls < 3 ? absl::UnavailableError("connection refused") : absl::OkStatus(); },
      nullptr, absl::Milliseconds(1));
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(calls, 3);
}

TEST(RemoteConnectTest, GivesUpAtTheDeadlineNamingServiceAndAddress) {
  absl::Status status = WaitForService(
      "weights service", "10.0.0.9:7400", absl::Milliseconds(30),
      [] { return absl::UnavailableError("connection refused"); }, nullptr, absl::Milliseconds(5));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(status.message().find("cannot reach the weights service at 10.0.0.9:7400"),
            absl::string_view::npos)
      << status;
  EXPECT_NE(status.message().find("connection refused"), absl::string_view::npos);
}

TEST(RemoteConnectTest, PermanentFailuresAreNotRetried) {
  int calls = 0;
  absl::Status status = WaitForService("buffer", "127.0.0.1:7300", absl::Seconds(10), [&] {
    ++calls;
    return absl::UnauthenticatedError("auth token does not match");
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(calls, 1);
}

TEST(RemoteConnectTest, CancelEndsTheWait) {
  std::atomic<bool> cancel{true};
  absl::Status status = WaitForService(
      "buffer", "127.0.0.1:7300", absl::Seconds(10),
      [] { return absl::UnavailableError("refused"); }, &cancel, absl::Milliseconds(1));
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace flywheel
